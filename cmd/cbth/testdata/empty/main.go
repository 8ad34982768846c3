// Command empty is the start-up floor of the start-up benchmark: a static
// Go binary that does nothing. A Go program cannot start faster.
package main

func main() {}
