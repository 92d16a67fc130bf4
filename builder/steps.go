package builder

import (
	"context"
	"fmt"
	"os"

	"github.com/strata-dev/strata/internal/tree"
)

// stepsSandbox names how run steps are run (see runInTree); it is part
// of their cache key, so a tree made under an older way is made again.
const stepsSandbox = "+sandbox-1"

// stepsInputs is everything the tree after a recipe's run steps depends on
// (short of the network and the commands' own whims); its hash is the
// cache key of that tree.
type stepsInputs struct {
	Kind  string      `json:"kind"`
	Rules string      `json:"rules"`
	Tree  string      `json:"tree"`
	Steps []stepInput `json:"steps"`
}

// stepInput is one step in a cache key: the step as written, plus the
// digest of what a copy with a src places (so a changed source file
// changes the key).
type stepInput struct {
	Step
	SrcTree string `json:"src_tree,omitempty"`
}

// applySteps runs the recipe's steps over the layout. Steps after the last
// run step only change the layout. The steps up to the last run step act
// on a copy of the tree on disk, and the resulting tree is cached under a
// key covering the tree before the steps and every step, so a rebuild
// reuses it and gives the same image.
func (l *layout) applySteps(ctx context.Context, r *Recipe, s *settings) error {
	last := -1
	for i, st := range r.Steps {
		if st.Run != "" {
			last = i
		}
	}
	if last >= 0 {
		in := stepsInputs{Kind: "steps", Rules: rulesVersion + stepsSandbox, Tree: l.state.Digest()}
		for _, st := range r.Steps[:last+1] {
			si := stepInput{Step: st}
			if st.Copy != nil && st.Copy.Src != "" {
				scratch := newLayout()
				if err := scratch.addFile(r, *st.Copy); err != nil {
					return err
				}
				si.SrcTree = scratch.state.Digest()
			}
			in.Steps = append(in.Steps, si)
		}
		key, err := cacheKey(in)
		if err != nil {
			return err
		}
		dir, entries, err := cached(ctx, s, "steps", key, in, func(tmp string) error {
			return l.runSteps(ctx, r, s, tmp, last)
		})
		if err != nil {
			return err
		}
		l.useDir(dir, entries)
	}
	for i := last + 1; i < len(r.Steps); i++ {
		if err := l.applyStep(r, i); err != nil {
			return err
		}
	}
	return nil
}

// runSteps performs steps 0..last in the empty directory tmp: the tree is
// written there before each run step and scanned back after it; after the
// last, the volatile-file rules clean it.
func (l *layout) runSteps(ctx context.Context, r *Recipe, s *settings, tmp string, last int) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("steps[%d].run: %w (it sets up their sandbox: user namespace, id-mapped mount; nothing is cached for this recipe in %s)", last, ErrNeedRoot, s.cache())
	}
	var prev tree.State
	for i := 0; i <= last; i++ {
		st := r.Steps[i]
		cmd := st.Run
		if cmd == "" {
			if err := l.applyStep(r, i); err != nil {
				return err
			}
			continue
		}
		s.progress(fmt.Sprintf("steps[%d]: writing the tree to %s", i, tmp))
		if err := l.materialize(tmp, prev); err != nil {
			return fmt.Errorf("steps[%d].run: %w", i, err)
		}
		s.progress(fmt.Sprintf("steps[%d]: run %s", i, cmd))
		if err := runInTree(ctx, tmp, cmd, st.Network != NetworkNone, func(line string) { s.progress("run: " + line) }); err != nil {
			return fmt.Errorf("steps[%d].run: %w", i, err)
		}
		if i == last {
			return cleanRootfs(tmp, false)
		}
		entries, err := scanRootfs(tmp)
		if err != nil {
			return fmt.Errorf("steps[%d].run: %w", i, err)
		}
		l.useDir(tmp, entries)
		prev = l.state.Clone()
	}
	return nil
}

// applyStep applies copy or remove step i to the layout.
func (l *layout) applyStep(r *Recipe, i int) error {
	st := r.Steps[i]
	if st.Copy != nil {
		if err := l.addFile(r, *st.Copy); err != nil {
			return fmt.Errorf("steps[%d].copy: %w", i, err)
		}
		return nil
	}
	p, _ := TreePath(st.Remove)
	if err := l.remove(p); err != nil {
		return fmt.Errorf("steps[%d].remove: %w", i, err)
	}
	return nil
}
