package serve

import (
	"context"
	"net"
	"net/http"
	"path"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/internal/repo"
)

// Limits bound what a server gives its clients. They count work, not
// connections: an idle keep-alive connection is closed to make room when
// the server is at its connection limit, and when none is idle the
// oldest nudge wait yields its connection (it ends at once, as if its
// hold had run out, and its agent asks again a hold later), so waits
// never shut polls out. Nudge waits (requests held open for a minute on
// purpose) have a pool of their own, index requests have a pool of their
// own beside other members (images can take long), and no client address
// may hold more than its share of either: a fleet behind one NAT address
// parks its waits without using up its polls' share. Zero fields take
// the defaults (DefaultLimits).
type Limits struct {
	// Conns bounds open connections; at the bound the longest-idle one
	// is closed for a new one, and only when none is idle does a new one
	// wait to be accepted.
	Conns int
	// Requests bounds member requests served at once, and index
	// requests (index.json and its signature) in a pool of their own of
	// the same size. A request waits up to 10 seconds for a slot, then
	// gets 503 with Retry-After.
	Requests int
	// Waits bounds nudge waits (GET /nudge) held at once; more get 503
	// with Retry-After at once. A held wait gives its connection up when
	// a poll needs it, so the default leaves the request pools their
	// room and lets waits have the rest.
	Waits int
	// PerClient bounds requests one client address has in flight, and
	// apart from them the nudge waits it holds; more get 429 with
	// Retry-After at once.
	PerClient int
}

// DefaultLimits are a server's limits unless set: connections up to the
// process's file limit less a reserve, 256 requests, the connections the
// two request pools do not need for nudge waits, 64 per client address.
func DefaultLimits() Limits {
	conns := 4096
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil && rl.Cur > 512 {
		conns = int(min(rl.Cur-256, 1<<20))
	}
	return Limits{Conns: conns, Requests: 256, Waits: waitsFor(conns, 256), PerClient: 64}
}

// waitsFor is the default wait pool for conns connections and requests
// per request pool: what the pools leave, and at least half.
func waitsFor(conns, requests int) int {
	return max(conns-2*requests, conns/2, 1)
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.Conns <= 0 {
		l.Conns = d.Conns
	}
	if l.Requests <= 0 {
		l.Requests = d.Requests
	}
	if l.Waits <= 0 {
		l.Waits = waitsFor(l.Conns, l.Requests)
	}
	if l.PerClient <= 0 {
		l.PerClient = d.PerClient
	}
	return l
}

// slotWait is how long a request waits for a free slot before 503.
const slotWait = 10 * time.Second

// conns tracks open connections and which are idle (no request in flight:
// a new connection, or a keep-alive one between requests).
type conns struct {
	max  int
	mu   sync.Mutex
	open int
	idle map[*slotConn]time.Time
	// parked are the connections holding a nudge wait, since when;
	// yielding counts those asked to yield that have not closed yet.
	parked   map[*slotConn]time.Time
	yielding int
	freed    chan struct{} // a token when a connection closes
}

func newConns(max int) *conns {
	return &conns{max: max, idle: map[*slotConn]time.Time{}, parked: map[*slotConn]time.Time{}, freed: make(chan struct{}, 1)}
}

// park marks c as holding a nudge wait until unpark: when the server
// needs a connection and none is idle, the oldest parked one is asked to
// yield (yield is closed), and its wait must end at once and close its
// connection.
func (t *conns) park(c *slotConn) (yield <-chan struct{}, unpark func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ch := make(chan struct{})
	c.yield = ch
	t.parked[c] = time.Now()
	return ch, func() {
		t.mu.Lock()
		delete(t.parked, c)
		t.mu.Unlock()
	}
}

// yieldOldest asks the oldest parked connection to yield, unless one
// asked before has not closed yet (it frees the slot soon). Under t.mu.
func (t *conns) yieldOldest() {
	if t.yielding > 0 {
		return
	}
	var oldest *slotConn
	var since time.Time
	for c, at := range t.parked {
		if oldest == nil || at.Before(since) {
			oldest, since = c, at
		}
	}
	if oldest == nil {
		return
	}
	delete(t.parked, oldest)
	oldest.yielded = true
	t.yielding++
	close(oldest.yield)
}

// connKey is the request context key of a request's connection.
type connKey struct{}

// connContext puts a connection the limits track in its requests'
// context (http.Server.ConnContext).
func connContext(ctx context.Context, c net.Conn) context.Context {
	if sc, ok := c.(*slotConn); ok {
		return context.WithValue(ctx, connKey{}, sc)
	}
	return ctx
}

// parkRequest marks r's connection as holding a nudge wait (conns.park);
// a nil channel and a no-op where the connection is not tracked.
func parkRequest(r *http.Request) (<-chan struct{}, func()) {
	sc, ok := r.Context().Value(connKey{}).(*slotConn)
	if !ok {
		return nil, func() {}
	}
	return sc.t.park(sc)
}

// minIdle is how long a connection must have been idle before it is
// closed for another: a keep-alive client reusing its connection, or a new
// one whose request is on its way, is not cut off.
const minIdle = time.Second

// reserve takes a slot for a connection just accepted, closing the
// longest-idle connection (idle for minIdle at least) when there is none,
// else asking the oldest nudge wait to give way, or waiting for one to
// close or age when none can be closed yet.
func (t *conns) reserve(done <-chan struct{}) bool {
	for {
		t.mu.Lock()
		if t.open < t.max {
			t.open++
			t.mu.Unlock()
			return true
		}
		var oldest *slotConn
		var since time.Time
		for c, at := range t.idle {
			if oldest == nil || at.Before(since) {
				oldest, since = c, at
			}
		}
		wait := time.Duration(-1)
		if oldest != nil {
			if wait = minIdle - time.Since(since); wait <= 0 {
				delete(t.idle, oldest)
			}
		} else {
			// Nothing idle: every connection is at work, or parked in a
			// nudge wait. A wait gives way.
			t.yieldOldest()
		}
		t.mu.Unlock()
		if oldest != nil && wait <= 0 {
			_ = oldest.Close()
			continue
		}
		var aged <-chan time.Time
		var tm *time.Timer
		if wait > 0 {
			tm = time.NewTimer(wait)
			aged = tm.C
		}
		stopped := false
		select {
		case <-t.freed:
		case <-aged:
		case <-done:
			stopped = true
		}
		if tm != nil {
			tm.Stop()
		}
		if stopped {
			return false
		}
	}
}

func (t *conns) release(c *slotConn) {
	t.mu.Lock()
	t.open--
	delete(t.idle, c)
	delete(t.parked, c)
	if c.yielded {
		t.yielding--
	}
	t.mu.Unlock()
	select {
	case t.freed <- struct{}{}:
	default:
	}
}

// state follows http.Server's view of each connection.
func (t *conns) state(nc net.Conn, st http.ConnState) {
	c, ok := nc.(*slotConn)
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch st {
	case http.StateNew, http.StateIdle:
		if c.yielded && !c.closed {
			// Asked to yield as its wait ended on its own: it goes now.
			go c.Close()
			return
		}
		if !c.closed {
			t.idle[c] = time.Now()
		}
	default:
		delete(t.idle, c)
	}
}

// limitListener accepts a connection only when the tracker has room.
type limitListener struct {
	net.Listener
	t    *conns
	done chan struct{}
	once sync.Once
}

// Accept accepts a connection, then waits for its slot: a slot is made
// (an idle connection closed, a nudge wait asked to give way) only for a
// client that is there, never ahead of one. The one connection waiting
// is the only one beyond the limit.
func (l *limitListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if !l.t.reserve(l.done) {
		c.Close()
		return nil, net.ErrClosed
	}
	return &slotConn{Conn: c, t: l.t}, nil
}

func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type slotConn struct {
	net.Conn
	t    *conns
	once sync.Once
	// Under t.mu: closed; yield, closed to ask a parked wait to end;
	// yielded once it was.
	closed  bool
	yield   chan struct{}
	yielded bool
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.t.mu.Lock()
		c.closed = true
		c.t.mu.Unlock()
		c.t.release(c)
	})
	return err
}

// gate bounds the requests in flight: member and index pools, nudge
// waits, and each client address's share.
type gate struct {
	members, index, waits chan struct{}
	perClient             int
	mu                    sync.Mutex
	// clients counts each address's requests in flight, waiters its
	// nudge waits.
	clients, waiters map[string]int
}

func newGate(l Limits) *gate {
	return &gate{
		members:   make(chan struct{}, l.Requests),
		index:     make(chan struct{}, l.Requests),
		waits:     make(chan struct{}, l.Waits),
		perClient: l.PerClient,
		clients:   map[string]int{},
		waiters:   map[string]int{},
	}
}

func (g *gate) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			client = r.RemoteAddr
		}
		name := path.Clean(r.URL.Path)
		isWait := name == "/nudge" && r.Method == http.MethodGet
		counts := g.clients
		if isWait {
			counts = g.waiters
		}
		if !g.enter(counts, client) {
			refuse(w, http.StatusTooManyRequests, 1, "too many requests from "+client+" at once")
			return
		}
		defer g.leave(counts, client)
		pool, wait := g.members, slotWait
		switch {
		case isWait:
			pool, wait = g.waits, 0
		case name == "/"+repo.IndexFile || name == "/"+repo.SigPath(repo.IndexFile):
			pool = g.index
		}
		if !take(pool, wait, r) {
			retry := 1
			if pool == g.waits {
				retry = int(RelayWait / time.Second)
			}
			refuse(w, http.StatusServiceUnavailable, retry, "the server is at its limit; retry")
			return
		}
		defer func() { <-pool }()
		h.ServeHTTP(w, r)
	})
}

func (g *gate) enter(counts map[string]int, client string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if counts[client] >= g.perClient {
		return false
	}
	counts[client]++
	return true
}

func (g *gate) leave(counts map[string]int, client string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if counts[client]--; counts[client] <= 0 {
		delete(counts, client)
	}
}

// take takes a slot of pool, waiting up to wait (or until the request
// ends).
func take(pool chan struct{}, wait time.Duration, r *http.Request) bool {
	select {
	case pool <- struct{}{}:
		return true
	default:
	}
	if wait <= 0 {
		return false
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case pool <- struct{}{}:
		return true
	case <-t.C:
	case <-r.Context().Done():
	}
	return false
}

func refuse(w http.ResponseWriter, code, retry int, msg string) {
	w.Header().Set("Retry-After", strconv.Itoa(retry))
	http.Error(w, msg, code)
}
