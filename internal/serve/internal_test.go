package serve

import (
	"fmt"
	"math"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The entity tag stays what it was when it was formatted with fmt, so a
// node or cache holding a tag from an older strata serve still gets 304.
func TestETagFormat(t *testing.T) {
	for _, c := range []struct {
		size  int64
		mtime time.Time
	}{
		{0, time.Unix(0, 0)},
		{462, time.Unix(1_765_000_000, 123_456_789)},
		{math.MaxInt64, time.Unix(0, math.MaxInt64)},
		{1, time.Unix(-5, 0)},
	} {
		want := fmt.Sprintf(`"%x-%x"`, c.size, c.mtime.UnixNano())
		if got := etag(c.size, c.mtime); got != want {
			t.Errorf("etag(%d, %v) = %s, want %s", c.size, c.mtime, got, want)
		}
	}
}

// Accepted connections carry no TCP keep-alive probes (four system calls
// each on Go's default, for nothing: see Listen).
func TestAcceptedConnsNoKeepAlive(t *testing.T) {
	s, err := Listen("127.0.0.1:0", nil, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.ln.Close()
	client, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c, err := s.ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, err := c.(*slotConn).Conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var on int
	var serr error
	if err := rc.Control(func(fd uintptr) { on, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE) }); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatal(serr)
	}
	if on != 0 {
		t.Fatalf("SO_KEEPALIVE is %d on an accepted connection, want 0", on)
	}
}
