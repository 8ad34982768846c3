package snapshot

// Hooks into the publisher and the builder for the tests of package
// snapshot_test (which publish through the adapter's inbox directory,
// adapters/desktop, and so cannot be internal tests).

// ForgetContent makes p take the next content for a changed one.
func ForgetContent(p *Publisher) { p.cur.hash, p.cur.version = [32]byte{}, 0 }

// Placed reports whether b has placed threads since it last started over.
func Placed(b *Builder) bool { return b.owner != nil }
