package serve

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/strata-dev/strata/internal/nudge"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/sign"
)

// RelayWait is how long GET /nudge holds a request open for a nudge.
const RelayWait = 55 * time.Second

// relay passes nudges from a publisher to the agents waiting on the
// server: POST /nudge takes a nudge the repository's own line verifies
// (signed by a key the line trusts at its head, fresh), GET
// /nudge?line=L&after=T waits up to RelayWait for one newer than T. Agents
// verify what they get with their node's keys: the relay only saves them
// from waiting for their next poll.
type relay struct {
	dir string
	log func(string)

	mu     sync.Mutex
	latest map[string]*nudge.Nudge
	raw    map[string][]byte
	wake   chan struct{} // closed and replaced when a nudge arrives

	keysMu sync.Mutex
	index  *repo.DirStore          // polled for changes to the index
	keys   map[string]*sign.KeySet // each line's head keys, for the index polled last
	absent map[string]error        // lines that index lacks
}

func newRelay(dir string, log func(string)) *relay {
	return &relay{dir: dir, log: log, latest: map[string]*nudge.Nudge{}, raw: map[string][]byte{}, wake: make(chan struct{}),
		index: repo.Dir(dir)}
}

func (rl *relay) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
		rl.post(w, r)
	case http.MethodGet:
		rl.wait(w, r)
	default:
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

func (rl *relay) post(w http.ResponseWriter, r *http.Request) {
	body, code, err := nudge.ReadBody(w, r)
	if err != nil {
		http.Error(w, err.Error(), code)
		return
	}
	n, err := nudge.Parse(body)
	if err == nil {
		err = rl.verify(r.Context(), n)
	}
	if err != nil {
		code := http.StatusForbidden
		if !errors.Is(err, nudge.ErrRefused) {
			code = http.StatusInternalServerError
		}
		http.Error(w, err.Error(), code)
		return
	}
	rl.mu.Lock()
	if old := rl.latest[n.Line]; old == nil || n.Time > old.Time {
		rl.latest[n.Line], rl.raw[n.Line] = n, body
		close(rl.wake)
		rl.wake = make(chan struct{})
	}
	rl.mu.Unlock()
	if rl.log != nil {
		rl.log("relaying a nudge for line " + n.Line)
	}
	w.WriteHeader(http.StatusAccepted)
}

// verify checks a nudge against the keys its line trusts at its head.
// The keys are worked out (the repository opened, the line's rotations
// followed) once per publication, not per nudge: anyone can post one.
func (rl *relay) verify(ctx context.Context, n *nudge.Nudge) error {
	keys, err := rl.lineKeys(ctx, n.Line)
	if err != nil {
		return err
	}
	return n.Verify(keys, n.Line, time.Now())
}

func (rl *relay) lineKeys(ctx context.Context, line string) (*sign.KeySet, error) {
	rl.keysMu.Lock()
	defer rl.keysMu.Unlock()
	changed, err := rl.index.Poll(ctx)
	if err != nil {
		return nil, err
	}
	if changed || rl.keys == nil {
		rl.keys, rl.absent = map[string]*sign.KeySet{}, map[string]error{}
	}
	if ks, ok := rl.keys[line]; ok {
		return ks, nil
	}
	if err, ok := rl.absent[line]; ok {
		return nil, err
	}
	r, err := repo.Open(ctx, rl.dir, nil)
	if err != nil {
		return nil, err
	}
	l, err := r.Index.Find(line)
	if err != nil {
		err = errors.Join(nudge.ErrRefused, err)
		if len(rl.absent) < 1024 {
			rl.absent[line] = err
		}
		return nil, err
	}
	ks, err := repo.HeadKeys(ctx, r, l)
	if err != nil {
		return nil, err
	}
	rl.keys[line] = ks
	return ks, nil
}

func (rl *relay) wait(w http.ResponseWriter, r *http.Request) {
	line := r.URL.Query().Get("line")
	after, _ := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
	timer := time.NewTimer(RelayWait)
	defer timer.Stop()
	yield, unpark := parkRequest(r)
	defer unpark()
	for {
		rl.mu.Lock()
		n, raw, wake := rl.latest[line], rl.raw[line], rl.wake
		rl.mu.Unlock()
		if n != nil && n.Time > after && time.Since(n.At()) < nudge.Window {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Cache-Control", "no-store")
			_, _ = w.Write(raw)
			return
		}
		select {
		case <-wake:
		case <-timer.C:
			w.WriteHeader(http.StatusNoContent)
			return
		case <-yield:
			// The server needs the connection: the hold ends as if it
			// ran out, and the connection closes.
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusNoContent)
			return
		case <-r.Context().Done():
			return
		}
	}
}
