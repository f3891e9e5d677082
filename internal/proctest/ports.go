package proctest

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// FreePorts returns n distinct free loopback TCP ports, held open together while picked so
// they differ; another process could still take one before the child binds it, in which
// case the child fails to start and its log says so.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	var lis []net.Listener
	defer func() {
		for _, l := range lis {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis = append(lis, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// ServerPorts returns n distinct free loopback TCP ports below the kernel's ephemeral
// range, for servers that bind late: vLLM binds its HTTP port ~20 s and its replay socket
// ~30 s after it starts, long enough for an outgoing connection of any process on the
// machine to be given a port that FreePorts picked from the ephemeral range.
func ServerPorts(t testing.TB, n int) []int {
	t.Helper()
	lo := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				lo = v
			}
		}
	}
	const span = 10000
	if lo <= 1024+span {
		return FreePorts(t, n)
	}
	var ports []int
	var lis []net.Listener
	defer func() {
		for _, l := range lis {
			l.Close()
		}
	}()
	for p := lo - span + rand.IntN(span/2); len(ports) < n && p < lo; p++ {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		lis = append(lis, l)
		ports = append(ports, p)
	}
	if len(ports) < n {
		t.Fatalf("found only %d free loopback ports below %d", len(ports), lo)
	}
	return ports
}
