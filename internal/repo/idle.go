package repo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// IdleTimeout is how long a download may make no progress before it is
// abandoned: a server that sends headers and then stalls (or trickles
// nothing) must not hold a reader, and the node lock it may hold, for
// ever.
var IdleTimeout = 60 * time.Second

// errIdle reports a stalled download.
var errIdle = errors.New("no data received for too long")

// idleBody reads a response body, cancelling its request (through
// cancel) when no byte arrives for IdleTimeout.
type idleBody struct {
	rc     io.ReadCloser
	cancel context.CancelFunc
	timer  *time.Timer
	mu     sync.Mutex
	idle   bool
}

// withIdleTimeout returns a context for a request and a function that
// wraps its response body in the idle watchdog (which also releases the
// context when the body is closed).
func withIdleTimeout(ctx context.Context) (context.Context, func(io.ReadCloser) io.ReadCloser, context.CancelFunc) {
	rctx, cancel := context.WithCancel(ctx)
	wrap := func(rc io.ReadCloser) io.ReadCloser {
		b := &idleBody{rc: rc, cancel: cancel}
		b.timer = time.AfterFunc(IdleTimeout, func() {
			b.mu.Lock()
			b.idle = true
			b.mu.Unlock()
			cancel()
		})
		return b
	}
	return rctx, wrap, cancel
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 {
		b.timer.Reset(IdleTimeout)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		b.mu.Lock()
		idle := b.idle
		b.mu.Unlock()
		if idle {
			err = fmt.Errorf("%w (%s): %v", errIdle, IdleTimeout, err)
		}
	}
	return n, err
}

func (b *idleBody) Close() error {
	b.timer.Stop()
	err := b.rc.Close()
	b.cancel()
	return err
}
