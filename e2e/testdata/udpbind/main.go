// Command udpbind binds UDP port os.Args[1] on every address, says so, and
// holds it until killed: TestEmbeddedDNSLeavesPort53 runs it in a
// container to show that the port is the container's own.
package main

import (
	"fmt"
	"net"
	"os"
	"time"
)

func main() {
	pc, err := net.ListenPacket("udp4", ":"+os.Args[1])
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	defer pc.Close()
	fmt.Println("bound", pc.LocalAddr())
	time.Sleep(time.Hour)
}
