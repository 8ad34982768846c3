// TEMPORARY (C6 branch only): the lead's kong main replaces this file at
// merge; it must keep calling multicall first.
package main

import "os"

func main() {
	if code, ok := multicall(os.Args[0], os.Args[1:]); ok {
		os.Exit(code)
	}
	os.Exit(2)
}
