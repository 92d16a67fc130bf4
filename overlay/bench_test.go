package overlay_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/node/nodetest"
	. "github.com/strata-dev/strata/overlay"
)

// benchLine builds a line with an image of files files and one overlay
// rewriting changed of them, and a provisioned node; it returns the node,
// the overlay and a directory for per-iteration copies.
func benchLine(b *testing.B, files, changed int) (node, overlayPath string) {
	b.Helper()
	node, paths, _ := benchBatch(b, files, changed, 1)
	return node, paths[0]
}

// benchBatch is benchLine with n overlays, each rewriting the same changed
// files again; it also returns the repository.
func benchBatch(b *testing.B, files, changed, n int) (node string, overlays []string, repoDir string) {
	b.Helper()
	dir := b.TempDir()
	rootfs := filepath.Join(dir, "recipe", "rootfs")
	change := filepath.Join(dir, "change")
	for i := 0; i < files; i++ {
		rel := fmt.Sprintf("usr/share/bench/d%02d/f%05d", i%40, i)
		data := []byte(fmt.Sprintf("file %d %0512d\n", i, i))
		for _, root := range []string{rootfs, change} {
			if root == change && i%(files/changed) != 0 {
				continue
			}
			p := filepath.Join(root, rel)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				b.Fatal(err)
			}
			if root == change {
				data = append(data, "changed\n"...)
			}
			if err := os.WriteFile(p, data, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	recipe := filepath.Join(dir, "recipe", "recipe.yaml")
	if err := os.WriteFile(recipe, []byte("line: bench\nversion: 1.0.0\nbase:\n  dir: rootfs\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	if err := sign.Generate(filepath.Join(dir, "k")); err != nil {
		b.Fatal(err)
	}
	key, err := sign.LoadKey(filepath.Join(dir, "k.key"))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	res, err := builder.Build(ctx, recipe, filepath.Join(dir, "img"), builder.WithKey(key))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := repo.Init(context.Background(), filepath.Join(dir, "repo"), res.Image, key); err != nil {
		b.Fatal(err)
	}
	for v := 1; v <= n; v++ {
		if v > 1 {
			err := filepath.WalkDir(change, func(p string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(f, "version %d\n", v)
				return errors.Join(err, f.Close())
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		c, err := Create(ctx, filepath.Join(dir, "repo"), key, Change{Tree: change}, CreateOptions{Version: fmt.Sprintf("1.0.%d", v)})
		if err != nil {
			b.Fatal(err)
		}
		overlays = append(overlays, c.Path)
	}
	node = filepath.Join(dir, "node0")
	if _, err := builder.Provision(ctx, res.Image, node, nil); err != nil {
		b.Fatal(err)
	}
	return node, overlays, filepath.Join(dir, "repo")
}

// BenchmarkApply measures apply-overlay of 200 changed files on a node of
// 4000 (make bench compares the command with tar -x of the same payload).
func BenchmarkApply(b *testing.B) {
	node0, ov := benchLine(b, 4000, 200)
	benchApply(b, node0, node.Source{Files: []string{ov}})
}

// benchApply applies src to a fresh copy of node0 per iteration.
func benchApply(b *testing.B, node0 string, src node.Source) {
	work := filepath.Join(filepath.Dir(node0), "node")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		_ = os.RemoveAll(work)
		if out, err := exec.Command("cp", "-a", node0, work).CombinedOutput(); err != nil {
			b.Fatalf("cp: %v %s", err, out)
		}
		b.StartTimer()
		if _, err := nodetest.Apply(context.Background(), work, src, node.ApplyOptions{}, node.Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkApplyBatch measures apply-overlay --repo of a batch of three
// overlays of 200 changed files each on a node of 4000, the case where the
// later payloads are verified before the first is applied.
func BenchmarkApplyBatch(b *testing.B) {
	node0, _, repoDir := benchBatch(b, 4000, 200, 3)
	benchApply(b, node0, node.Source{Repo: repoDir})
}

// BenchmarkVerifyFiles measures a full file audit of a 4000-file node.
func BenchmarkVerifyFiles(b *testing.B) {
	node0, _ := benchLine(b, 4000, 200)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		a, err := nodetest.Verify(context.Background(), node0, node.VerifyOptions{Files: true})
		if err != nil || !a.OK() {
			b.Fatalf("verify: %v %+v", err, a)
		}
	}
}

// BenchmarkPayloadVerify measures one verification pass over the payloads
// of the later overlays of BenchmarkApplyBatch's batch: what Apply spends
// to keep a bad later payload from changing the node at all.
func BenchmarkPayloadVerify(b *testing.B) {
	_, overlays, repoDir := benchBatch(b, 4000, 200, 3)
	r, err := repo.Open(context.Background(), repoDir, nil)
	if err != nil {
		b.Fatal(err)
	}
	im, err := r.Image(context.Background(), &r.Index.Lines[0], nil)
	if err != nil {
		b.Fatal(err)
	}
	trust, err := im.Trust()
	if err != nil {
		b.Fatal(err)
	}
	var archives []*Archive
	for _, p := range overlays[1:] {
		a, err := Open(p, trust)
		if err != nil {
			b.Fatal(err)
		}
		archives = append(archives, a)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, a := range archives {
			if err := a.Verify(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	}
}
