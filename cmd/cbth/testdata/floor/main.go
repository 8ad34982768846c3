// Command floor is the reference CLI for the submit benchmark: a static Go
// binary that dials the daemon's socket, sends one request line, reads one
// response line and exits. Nothing a real CLI can do is cheaper.
package main

import (
	"bufio"
	"net"
	"os"
)

func main() {
	c, err := net.Dial("unix", os.Args[1])
	if err != nil {
		os.Exit(1)
	}
	if _, err := c.Write([]byte(os.Args[2] + "\n")); err != nil {
		os.Exit(1)
	}
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		os.Exit(1)
	}
}
