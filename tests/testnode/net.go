package testnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The test subnet: node slot S (1..250) has P.S.2 on its eth0 and the
// host P.S.1 on the other end of the veth pair, P being 10.231 unless
// $STRATA_TEST_NET names another /16 ("A.B", for a machine where 10.231
// is routed). No address outside it is ever configured.
var netPrefix = testNet()

func testNet() string {
	if p := os.Getenv("STRATA_TEST_NET"); p != "" {
		if ip := net.ParseIP(p + ".0.0"); ip != nil && ip.To4() != nil && strings.Count(p, ".") == 1 {
			return p + "."
		}
		panic(fmt.Sprintf("testnode: $STRATA_TEST_NET=%q: want the first two octets of a /16, such as 10.231", p))
	}
	return "10.231."
}

const (
	maxSlots = 250
	// slotDir holds one lock file per slot; a node holds its slot's
	// flock for its lifetime, so test binaries running at once never
	// share a subnet (the lock dies with the process).
	slotDir = "/run/strata-testnet"
)

// link is a node's network: its slot and the flock that reserves it.
type link struct {
	slot int
	lock *os.File
}

// hostIf is the host end of the node's veth pair.
func (l *link) hostIf() string { return fmt.Sprintf("strata-tn%d", l.slot) }

// reserveSlot takes the first free slot.
func reserveSlot() (*link, error) {
	if err := os.MkdirAll(slotDir, 0o755); err != nil {
		return nil, fmt.Errorf("reserving a test subnet: %w", err)
	}
	for s := 1; s <= maxSlots; s++ {
		f, err := os.OpenFile(filepath.Join(slotDir, strconv.Itoa(s)), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return nil, fmt.Errorf("reserving a test subnet: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err == nil {
			return &link{slot: s, lock: f}, nil
		}
		f.Close()
	}
	return nil, fmt.Errorf("reserving a test subnet: all %d slots of %s0.0/16 are taken", maxSlots, netPrefix)
}

func (l *link) release() {
	if l != nil && l.lock != nil {
		l.lock.Close()
		l.lock = nil
	}
}

// plug creates the veth pair into the network namespace of pid (the
// node's PID 1) and configures both ends.
func (l *link) plug(ctx context.Context, pid int) error {
	hostIf, p := l.hostIf(), strconv.Itoa(pid)
	// A pair left by a killed run of the same slot dies with its node's
	// namespace; delete it anyway when the node's end was moved back.
	_ = exec.CommandContext(ctx, "ip", "link", "del", hostIf).Run()
	host := fmt.Sprintf("%s%d.1", netPrefix, l.slot)
	steps := [][]string{
		{"ip", "link", "add", hostIf, "type", "veth", "peer", "name", "eth0", "netns", p},
		{"ip", "addr", "add", host + "/24", "dev", hostIf},
		{"ip", "link", "set", hostIf, "up"},
		{"nsenter", "-t", p, "-n", "ip", "addr", "add", l.addr() + "/24", "dev", "eth0"},
		{"nsenter", "-t", p, "-n", "ip", "link", "set", "eth0", "up"},
		{"nsenter", "-t", p, "-n", "ip", "route", "add", "default", "via", host},
	}
	for _, s := range steps {
		if out, err := exec.CommandContext(ctx, s[0], s[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("network of the node: %s: %w: %s", strings.Join(s, " "), err, out)
		}
	}
	return nil
}

// addr is the node's address.
func (l *link) addr() string { return fmt.Sprintf("%s%d.2", netPrefix, l.slot) }

// Address is the node's IPv4 address on the test subnet, or "" when its
// Config has no Network.
func (n *Node) Address() string {
	if n.net == nil {
		return ""
	}
	return n.net.addr()
}

// HostAddress is the host's address on the node's link (where the node
// reaches services the test runs on the host), or "" without Network.
func (n *Node) HostAddress() string {
	if n.net == nil {
		return ""
	}
	return fmt.Sprintf("%s%d.1", netPrefix, n.net.slot)
}

// SetLink takes the node's end of its link down or up: down, packets to
// the node are dropped (connections time out, as to a node that lost its
// network), and nothing is routed anywhere else.
func (n *Node) SetLink(ctx context.Context, up bool) error {
	if n.net == nil {
		return errors.New("testnode: the node has no network (Config.Network)")
	}
	state := map[bool]string{true: "up", false: "down"}[up]
	pid := strconv.Itoa(n.PID())
	if out, err := exec.CommandContext(ctx, "nsenter", "-t", pid, "-n", "ip", "link", "set", "eth0", state).CombinedOutput(); err != nil {
		return fmt.Errorf("testnode: setting node %s's link %s: %w: %s", n.cfg.Name, state, err, out)
	}
	if up {
		// Bringing the link up drops the default route; put it back.
		if out, err := exec.CommandContext(ctx, "nsenter", "-t", pid, "-n", "ip", "route", "replace", "default", "via", n.HostAddress()).CombinedOutput(); err != nil {
			return fmt.Errorf("testnode: node %s's default route: %w: %s", n.cfg.Name, err, out)
		}
		return n.awaitLink(ctx)
	}
	return nil
}

// awaitLink returns once the node answers on its address again. A link
// that was just set up is not yet usable: the host end's carrier comes
// back through the kernel's link watch, up to seconds later on a loaded
// machine, and until then ARP requests are dropped and the host's
// neighbour entry for the node ends FAILED, so a caller that dials at
// once gets "no route to host". The host's stale entry is flushed, then
// a TCP connection to a closed port is tried until the node's kernel
// answers (a refusal is an answer) or a minute has passed.
func (n *Node) awaitLink(ctx context.Context) error {
	_ = exec.CommandContext(ctx, "ip", "neigh", "flush", "dev", n.net.hostIf()).Run()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	addr := net.JoinHostPort(n.net.addr(), "9")
	var d net.Dialer
	for {
		try, stop := context.WithTimeout(ctx, time.Second)
		c, err := d.DialContext(try, "tcp", addr)
		stop()
		if err == nil {
			c.Close()
			return nil
		}
		if errors.Is(err, unix.ECONNREFUSED) {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("testnode: node %s's link is up but %s does not answer: %w", n.cfg.Name, n.net.addr(), err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}
