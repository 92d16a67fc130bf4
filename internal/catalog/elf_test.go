package catalog

import (
	"debug/elf"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/strata-dev/strata/manifests"
)

// hostLibDirs are where the test looks for the host's copies of libraries.
var hostLibDirs = []string{
	"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
	"/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
	"/lib64", "/usr/lib64", "/lib", "/usr/lib",
}

// elfTree copies host programs into a tree laid out like this:
//
//	bin -> usr/bin, lib -> usr/lib
//	usr/bin/<name>                  copies of the programs
//	<PT_INTERP path>                -> /opt/ld/<base> (absolute, in-tree only)
//	usr/lib/<triplet>/libc.so.6     -> libc-test.so
//	opt/libs/*                      other libraries, via etc/ld.so.conf.d
//	opt/libs/libc.so.6              a non-ELF decoy the loader must skip
//
// It returns the tree root, the interpreter path and the machine.
func elfTree(t *testing.T, progs ...string) (root, interp string, machine elf.Machine) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Fatal("needs a Linux host for ELF programs")
	}
	root = t.TempDir()
	put := func(rel string, data []byte) {
		t.Helper()
		mkdir(t, filepath.Join(root, path.Dir(rel)))
		if err := os.WriteFile(filepath.Join(root, rel), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	symlink := func(target, rel string) {
		t.Helper()
		mkdir(t, filepath.Join(root, path.Dir(rel)))
		if err := os.Symlink(target, filepath.Join(root, rel)); err != nil {
			t.Fatal(err)
		}
	}
	symlink("usr/bin", "bin")
	symlink("usr/lib", "lib")
	put("etc/ld.so.conf", []byte("# test\ninclude /etc/ld.so.conf.d/*.conf\n"))
	put("etc/ld.so.conf.d/opt.conf", []byte("/opt/libs\n"))
	put("opt/libs/libc.so.6", []byte("decoy"))

	var queue []string
	for _, p := range progs {
		data, ef := readHostELF(t, p)
		put("usr/bin/"+path.Base(p), data)
		machine = ef.Machine
		for _, prog := range ef.Progs {
			if prog.Type == elf.PT_INTERP {
				b := make([]byte, prog.Filesz)
				if _, err := prog.ReadAt(b, 0); err != nil {
					t.Fatal(err)
				}
				interp = strings.TrimRight(string(b), "\x00")
			}
		}
		needed, _ := ef.ImportedLibraries()
		queue = append(queue, needed...)
	}
	if interp == "" {
		t.Fatal("host programs are not dynamically linked")
	}
	data, _ := readHostELF(t, interp)
	put("opt/ld/"+path.Base(interp), data)
	symlink("/opt/ld/"+path.Base(interp), strings.TrimPrefix(interp, "/"))

	triplet := stdLibDirs(machine)[1]
	done := map[string]bool{}
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		if done[name] || name == path.Base(interp) {
			continue
		}
		done[name] = true
		host := findHostLib(t, name)
		data, ef := readHostELF(t, host)
		if name == "libc.so.6" {
			put(triplet+"/libc-test.so", data)
			symlink("libc-test.so", triplet+"/libc.so.6")
		} else {
			put("opt/libs/"+name, data)
		}
		needed, _ := ef.ImportedLibraries()
		queue = append(queue, needed...)
	}
	return root, interp, machine
}

func readHostELF(t *testing.T, p string) ([]byte, *elf.File) {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("host program missing: %v", err)
	}
	ef, err := elf.NewFile(strings.NewReader(string(data)))
	if err != nil {
		t.Fatalf("%s is not ELF: %v", p, err)
	}
	return data, ef
}

func findHostLib(t *testing.T, name string) string {
	t.Helper()
	for _, d := range hostLibDirs {
		if _, err := os.Stat(filepath.Join(d, name)); err == nil {
			return filepath.Join(d, name)
		}
	}
	t.Fatalf("host library %s not found", name)
	return ""
}

func TestBuildELF(t *testing.T) {
	root, interp, machine := elfTree(t, "/bin/sh")
	put := func(rel, data string) {
		mkdir(t, filepath.Join(root, path.Dir(rel)))
		if err := os.WriteFile(filepath.Join(root, rel), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	put(sysd+"shell.service", "[Service]\nExecStart=/bin/sh -c true\n")
	put(sysd+"script.service", "[Service]\nExecStart=/usr/local/bin/run\n")
	put("usr/local/bin/run", "#!/bin/sh\nexit 0\n")
	put(sysd+"lonely.service", "[Service]\nExecStart=/usr/local/bin/data\n")
	put("usr/local/bin/data", "\x7fELF but truncated")

	cat, err := Build(os.DirFS(root), nil)
	if err != nil {
		t.Fatal(err)
	}
	triplet := stdLibDirs(machine)[1]
	ip := strings.TrimPrefix(interp, "/")
	libc := []string{"lib/" + path.Base(triplet) + "/libc.so.6", triplet + "/libc.so.6", triplet + "/libc-test.so"}
	for _, unit := range []string{"shell.service", "script.service"} {
		s := service(t, cat, unit)
		for _, want := range append([]string{ip, "opt/ld/" + path.Base(interp)}, libc...) {
			if !slices.Contains(s.Libraries, want) {
				t.Errorf("%s: Libraries %q lack %s", unit, s.Libraries, want)
			}
		}
		if slices.Contains(s.Libraries, "opt/libs/libc.so.6") {
			t.Errorf("%s: Libraries %q hold the non-ELF decoy", unit, s.Libraries)
		}
		for _, want := range []string{"bin/sh", "usr/bin/sh"} {
			if !slices.Contains(s.Binaries, want) {
				t.Errorf("%s: Binaries %q lack %s", unit, s.Binaries, want)
			}
		}
	}
	if s := service(t, cat, "lonely.service"); len(s.Libraries) != 0 {
		t.Errorf("non-ELF program got libraries %q", s.Libraries)
	}
	acts, _ := Plan(cat, []string{triplet + "/libc-test.so"})
	if len(acts) != 2 || acts[0].Unit != "script.service" || acts[1].Unit != "shell.service" || acts[0].Action != manifests.ActionRestart {
		t.Errorf("Plan(libc change) = %+v, want restarts of script and shell", acts)
	}
}

// TestBuildELFTransitive checks libraries of libraries, found through
// etc/ld.so.conf.d, for a host program with several.
func TestBuildELFTransitive(t *testing.T) {
	root, _, _ := elfTree(t, "/usr/bin/ls")
	libs, err := os.ReadDir(filepath.Join(root, "opt/libs"))
	if err != nil {
		t.Fatal(err)
	}
	if len(libs) < 2 {
		t.Fatal("host ls loads no library besides libc")
	}
	mkdir(t, filepath.Join(root, sysd))
	if err := os.WriteFile(filepath.Join(root, sysd, "ls.service"), []byte("[Service]\nExecStart=ls\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cat, err := Build(os.DirFS(root), nil)
	if err != nil {
		t.Fatal(err)
	}
	s := service(t, cat, "ls.service")
	for _, l := range libs {
		want := "opt/libs/" + l.Name()
		if l.Name() != "libc.so.6" && !slices.Contains(s.Libraries, want) {
			t.Errorf("Libraries %q lack %s", s.Libraries, want)
		}
	}
}

func TestSearchDirs(t *testing.T) {
	li := &elfInfo{rpath: []string{"/r1", "$ORIGIN/../r2"}, runpath: nil}
	got := searchDirs("opt/app/bin/x", li, []string{"etc-conf"}, elf.EM_X86_64)
	want := []string{"r1", "opt/app/r2", "etc-conf", "lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib64", "usr/lib64", "lib", "usr/lib"}
	if !slices.Equal(got, want) {
		t.Errorf("rpath dirs = %q, want %q", got, want)
	}
	li = &elfInfo{rpath: []string{"/ignored"}, runpath: []string{"${ORIGIN}/lib", "relative", "/$PLATFORM/x", "/usr/lib"}}
	got = searchDirs("x", li, nil, elf.EM_AARCH64)
	want = []string{"lib", "usr/lib", "lib/aarch64-linux-gnu", "usr/lib/aarch64-linux-gnu", "lib64", "usr/lib64"}
	if !slices.Equal(got, want) {
		t.Errorf("runpath dirs = %q, want %q", got, want)
	}
}

func service(t *testing.T, cat manifests.Catalog, unit string) manifests.Service {
	t.Helper()
	for _, s := range cat.Services {
		if s.Unit == unit {
			return s
		}
	}
	t.Fatalf("no service %s in %+v", unit, cat)
	return manifests.Service{}
}
