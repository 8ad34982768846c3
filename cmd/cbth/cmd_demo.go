package main

// DemoCmd is `cbth demo`; filled in below once the daemon flow is proven.
type DemoCmd struct {
	Keep bool `help:"Keep the temporary home afterwards and print its path."`
}
