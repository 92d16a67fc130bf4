package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/strata-dev/strata/internal/catalog"
	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node/internal/configset"
)

// loadNote says where and how the units a plan restarts or reloads are
// recorded as having loaded their config (Loaded).
type loadNote struct {
	n   nodestate.Node
	obs Observer
	// by names what restarted them ("apply 1.2.0", "restart", ...).
	by string
	// progress reports a failure to record.
	progress func(string)
}

// noteFor is the load note of the node's restarts, by what.
func (h *Node) noteFor(by string) loadNote {
	return loadNote{n: h.b.Node(), obs: h.observer(), by: by, progress: h.o.Progress}
}

// record records that the units of done loaded their config as it is on
// disk now (the catalog cat names their config sets). Stops and the
// manager's own reloads load nothing; an instance is recorded under its
// template, which the catalog holds.
func (ln loadNote) record(ctx context.Context, cat manifests.Catalog, done []manifests.ServiceAction) error {
	if ln.n.Root == "" {
		return nil
	}
	claims := configset.Claims(cat)
	want := map[string][]string{}
	for _, a := range done {
		if a.Unit == "" || a.Action == manifests.ActionStop {
			continue
		}
		u := a.Unit
		if _, ok := claims[u]; !ok {
			u = catalog.TemplateOf(u)
		}
		if ps, ok := claims[u]; ok {
			want[u] = ps
		}
	}
	if len(want) == 0 {
		return nil
	}
	// A restart outlives a cancelled context: its record must too.
	ctx = context.WithoutCancel(ctx)
	disk, derrs, err := configset.Disk(ctx, ln.n.Root, want)
	if err != nil {
		return fmt.Errorf("recording what %s loaded: %w", ln.by, err)
	}
	var errs []error
	rec, err := ln.n.Loaded()
	if err != nil {
		// A record that cannot be read (tampered with, too large) is
		// started afresh: units without a record are judged by their
		// files' change times, and what was lost is said.
		errs = append(errs, fmt.Errorf("the old record is dropped: %w", err))
		rec = &manifests.Loaded{Schema: manifests.Schema, Kind: manifests.KindLoaded, Units: map[string]manifests.LoadedUnit{}}
	}
	// Units the catalog no longer has are not kept: the record stays as
	// large as the catalog.
	for u := range rec.Units {
		if _, ok := claims[u]; !ok {
			delete(rec.Units, u)
		}
	}
	var runs map[string]UnitRun
	if ln.obs != nil {
		var plain []string
		for u := range want {
			if !strings.Contains(u, "@.") {
				plain = append(plain, u)
			}
		}
		// Best effort: the invocation id only ties the record to a run.
		runs, _ = ln.obs.Observe(ctx, plain)
	}
	at := time.Now().UTC().Format(time.RFC3339Nano)
	for u := range want {
		if err := derrs[u]; err != nil {
			delete(rec.Units, u) // not known: judged by change times
			errs = append(errs, err)
			continue
		}
		rec.Units[u] = manifests.LoadedUnit{Files: disk[u].Set, At: at, By: ln.by, InvocationID: runs[u].InvocationID}
	}
	if err := ln.n.SetLoaded(rec); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("recording what %s loaded: %w", ln.by, err)
	}
	return nil
}

// validationKey names one validation of a unit's config on disk.
type validationKey struct{ root, unit, disk, head, argv string }

// validations keeps the outcome of validating configs on disk, so that a
// health request or scrape runs a validation command once per change.
var validations = validationCache{m: map[validationKey]error{}}

type validationCache struct {
	sync.Mutex
	m map[validationKey]error
}

func (c *validationCache) get(k validationKey) (error, bool) {
	c.Lock()
	defer c.Unlock()
	err, ok := c.m[k]
	return err, ok
}

func (c *validationCache) put(k validationKey, err error) {
	c.Lock()
	defer c.Unlock()
	if len(c.m) >= 1024 {
		clear(c.m)
	}
	c.m[k] = err
}
