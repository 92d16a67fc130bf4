package tree_test

import (
	"errors"
	"reflect"
	"sort"
	"testing"

	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

func dirE(p string) manifests.Entry {
	return manifests.Entry{Path: p, Type: manifests.TypeDir, Mode: 0755}
}

func fileE(p, content string) manifests.Entry {
	return manifests.Entry{Path: p, Type: manifests.TypeFile, Mode: 0644, Size: int64(len(content)), SHA256: sum(content)}
}

func linkE(p, target string) manifests.Entry {
	return manifests.Entry{Path: p, Type: manifests.TypeSymlink, Mode: 0777, Target: target}
}

func keys(s tree.State) []string {
	out := []string{}
	for p := range s {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

func baseState() tree.State {
	return tree.NewState([]manifests.Entry{
		dirE("etc"),
		dirE("etc/app"),
		fileE("etc/app/a.conf", "a"),
		dirE("etc/app/conf.d"),
		fileE("etc/app/conf.d/x", "x"),
		fileE("etc/motd", "hi"),
		linkE("etc/link", "app"),
		dirE("usr"),
	})
}

func TestStateEntriesDigest(t *testing.T) {
	s := baseState()
	es := s.Entries()
	for i := 1; i < len(es); i++ {
		if es[i-1].Path >= es[i].Path {
			t.Fatalf("Entries not sorted at %s", es[i].Path)
		}
	}
	if s.Digest() != manifests.TreeDigest(es) {
		t.Fatal("State.Digest differs from TreeDigest of its entries")
	}
}

func TestStateApply(t *testing.T) {
	s := baseState()
	before := keys(s)

	// Replacing a directory with a file drops its subtree.
	next, err := s.Apply([]manifests.Entry{fileE("etc/app", "now a file")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"etc", "etc/app", "etc/link", "etc/motd", "usr"}; !reflect.DeepEqual(keys(next), want) {
		t.Fatalf("after replacing dir with file: %v, want %v", keys(next), want)
	}
	if next["etc/app"].Type != manifests.TypeFile {
		t.Fatalf("etc/app is %s", next["etc/app"].Type)
	}
	// Replacing a directory with a symlink drops it too.
	next, err = s.Apply([]manifests.Entry{linkE("etc/app", "/usr")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := next["etc/app/a.conf"]; ok {
		t.Fatal("replacing a dir with a symlink kept its contents")
	}
	// Replacing a directory with a directory keeps its contents.
	d := dirE("etc/app")
	d.Mode = 0700
	next, err = s.Apply([]manifests.Entry{d}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(next) != len(s) || next["etc/app"].Mode != 0700 {
		t.Fatalf("dir mode change: %v", keys(next))
	}
	// The receiver is never modified.
	if !reflect.DeepEqual(keys(s), before) || s["etc/app"].Type != manifests.TypeDir || s["etc/app"].Mode != 0755 {
		t.Fatal("Apply modified its receiver")
	}

	// Delete removes the subtree; delete and add in one step.
	next, err = s.Apply([]manifests.Entry{dirE("etc/new"), fileE("etc/new/f", "f")}, []string{"etc/app"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"etc", "etc/link", "etc/motd", "etc/new", "etc/new/f", "usr"}; !reflect.DeepEqual(keys(next), want) {
		t.Fatalf("after delete+add: %v, want %v", keys(next), want)
	}
	// Deleting then re-creating the same path in one apply.
	next, err = s.Apply([]manifests.Entry{dirE("etc/app")}, []string{"etc/app"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"etc", "etc/app", "etc/link", "etc/motd", "usr"}; !reflect.DeepEqual(keys(next), want) {
		t.Fatalf("after delete and recreate: %v, want %v", keys(next), want)
	}
	// Entries may create a directory and then fill it.
	if _, err := s.Apply([]manifests.Entry{dirE("opt"), dirE("opt/x"), fileE("opt/x/y", "y")}, nil); err != nil {
		t.Fatalf("nested adds: %v", err)
	}
	// Deleting a prefix-sibling leaves the other alone.
	s2 := tree.NewState([]manifests.Entry{dirE("a"), dirE("ab"), fileE("ab/x", "x")})
	next, err = s2.Apply(nil, []string{"a"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"ab", "ab/x"}; !reflect.DeepEqual(keys(next), want) {
		t.Fatalf("delete a: %v, want %v", keys(next), want)
	}
}

func TestStateApplyErrors(t *testing.T) {
	s := baseState()
	tests := []struct {
		name    string
		entries []manifests.Entry
		deletes []string
		target  error
	}{
		{"missing parent", []manifests.Entry{fileE("opt/x", "x")}, nil, tree.ErrNotExist},
		{"missing grandparent", []manifests.Entry{fileE("a/b/c", "x")}, nil, tree.ErrNotExist},
		{"parent deleted", []manifests.Entry{fileE("etc/app/b.conf", "b")}, []string{"etc/app"}, tree.ErrNotExist},
		{"parent is symlink", []manifests.Entry{fileE("etc/link/x", "x")}, nil, tree.ErrNotDir},
		{"parent is file", []manifests.Entry{fileE("etc/motd/x", "x")}, nil, tree.ErrNotDir},
		{"parent replaced by file", []manifests.Entry{fileE("etc/app", "f"), fileE("etc/app/b", "b")}, nil, tree.ErrNotDir},
		{"delete missing", nil, []string{"etc/nothing"}, tree.ErrNotExist},
		{"delete twice", nil, []string{"etc/motd", "etc/motd"}, tree.ErrNotExist},
		{"delete below deleted", nil, []string{"etc/app", "etc/app/a.conf"}, tree.ErrNotExist},
	}
	for _, tt := range tests {
		next, err := s.Apply(tt.entries, tt.deletes)
		if !errors.Is(err, tt.target) {
			t.Errorf("%s: Apply = %v, want %v", tt.name, err, tt.target)
		}
		if next != nil {
			t.Errorf("%s: Apply returned a state with its error", tt.name)
		}
	}
}
