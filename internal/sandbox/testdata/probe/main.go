// Command probe reports, one "key=value" line each, what a process can
// see and do from where it runs: the sandbox tests run it inside and
// check the report. With "true" it exits at once; with "sleep" it sleeps
// for ten minutes; with
// "alloc N" it maps N MiB and touches them; with "build" it does what a
// build step does to its tree (writes a file, gives one to uid 33, runs
// as another user) and reports each.
package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "true":
			return
		case "sleep":
			time.Sleep(10 * time.Minute)
			return
		case "alloc":
			n, _ := strconv.Atoi(os.Args[2])
			b, err := syscall.Mmap(-1, 0, n<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
			if err != nil {
				fmt.Println("alloc:", err)
				os.Exit(3)
			}
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1
			}
			fmt.Println("alloc=ok")
			return
		case "memfd":
			// Memory no address space counts: a memfd written to.
			n, _ := strconv.Atoi(os.Args[2])
			fd, err := unix.MemfdCreate("fill", 0)
			if err != nil {
				fmt.Println("memfd:", err)
				os.Exit(3)
			}
			chunk := make([]byte, 1<<20)
			for i := 0; i < n; i++ {
				if _, err := unix.Write(fd, chunk); err != nil {
					fmt.Println("memfd write:", err)
					os.Exit(3)
				}
			}
			fmt.Println("memfd=ok")
			return
		case "build":
			build()
			return
		}
	}
	say := func(k string, v any) { fmt.Printf("%s=%v\n", k, v) }
	errOf := func(err error) string {
		if err == nil {
			return "ok"
		}
		return err.Error()
	}
	say("pid", os.Getpid())
	say("uid", os.Getuid())
	root, err := os.Readlink("/proc/1/root")
	say("pid1root", root+errOf(err))
	status, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(status), "\n") {
		for _, k := range []string{"CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp", "Groups"} {
			if v, ok := strings.CutPrefix(l, k+":"); ok {
				say(k, strings.TrimSpace(v))
			}
		}
	}
	m, _ := os.ReadFile("/proc/self/uid_map")
	say("uidmap", strings.Join(strings.Fields(string(m)), " "))
	host, _ := os.Hostname()
	say("hostname", host)
	// Files of the tree: a secret only root may read, its owner as seen here.
	secret, err := os.ReadFile("/etc/secret")
	say("secret", strings.TrimSpace(string(secret))+errOf(err))
	var st syscall.Stat_t
	err = syscall.Stat("/etc/secret", &st)
	say("secretowner", fmt.Sprintf("%s %d", errOf(err), st.Uid))
	// The node's own secrets, which a view hides.
	shadow, err := os.ReadFile("/etc/shadow")
	say("shadow", strings.TrimSpace(string(shadow))+errOf(err))
	_, err = os.ReadFile("/root/.ssh/id_ed25519")
	say("rootkey", errOf(err))
	// Writes land in the view, not in the tree.
	say("write", errOf(os.WriteFile("/etc/written", []byte("x"), 0o644)))
	say("tmpwrite", errOf(os.WriteFile("/tmp/x", []byte("x"), 0o644)))
	say("runwrite", errOf(os.WriteFile("/run/x.pid", []byte("1"), 0o644)))
	// A log file another user owns, as nginx's error.log is www-data's.
	f, err := os.OpenFile("/var/log/app.log", os.O_WRONLY|os.O_APPEND, 0)
	if err == nil {
		_, err = f.WriteString("appended\n")
		f.Close()
	}
	say("otherwrite", errOf(err))
	// What a breakout would try.
	say("mount", errOf(syscall.Mount("none", "/mnt", "tmpfs", 0, "")))
	say("unshare", errOf(syscall.Unshare(syscall.CLONE_NEWUSER)))
	_, _, e := syscall.RawSyscall(syscall.SYS_KEYCTL, 0, 0, 0)
	say("keyctl", errOf(errnoErr(e)))
	say("chroot", errOf(syscall.Chroot("/")))
	_, err = os.Stat(os.Getenv("CANARY"))
	say("canary", errOf(err))
	say("devnull", errOf(os.WriteFile("/dev/null", []byte("x"), 0)))
	if l, err := net.Listen("tcp", "127.0.0.1:80"); err == nil {
		l.Close()
		say("lowbind", "ok")
	} else {
		say("lowbind", err)
	}
	ifs, _ := net.Interfaces()
	var names []string
	for _, i := range ifs {
		names = append(names, i.Name)
	}
	say("interfaces", strings.Join(names, ","))
	// Sockets of a family that leaves every network namespace (AF_VSOCK
	// reaches the hypervisor).
	fd, err := syscall.Socket(40 /* AF_VSOCK */, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.Close(fd)
	}
	say("vsock", errOf(err))
	// A descriptor the caller left open must not be here: none may lead
	// to the canary (which the test holds open).
	leaked := "none"
	fdEnts, _ := os.ReadDir("/proc/self/fd")
	for _, e := range fdEnts {
		if l, _ := os.Readlink("/proc/self/fd/" + e.Name()); l != "" && l == os.Getenv("CANARY") {
			leaked = "fd " + e.Name()
		}
	}
	say("leaked", leaked)
	if a := os.Getenv("DIAL"); a != "" {
		c, err := net.DialTimeout("tcp", a, 2*time.Second)
		if c != nil {
			c.Close()
		}
		say("dial", errOf(err))
	}
}

func errnoErr(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// build writes /etc/built as root, makes /etc/owned33 uid and gid 33's,
// writes in /tmp, then switches to uid 100 (as apt does to _apt).
func build() {
	res := func(k string, err error) {
		if err == nil {
			fmt.Printf("%s=ok\n", k)
			return
		}
		fmt.Printf("%s=%v\n", k, err)
	}
	res("built", os.WriteFile("/etc/built", []byte("built\n"), 0o644))
	err := os.WriteFile("/etc/owned33", []byte("33\n"), 0o640)
	if err == nil {
		err = os.Chown("/etc/owned33", 33, 33)
	}
	res("chown", err)
	res("tmp", os.WriteFile("/tmp/scratch", []byte("x"), 0o644))
	res("setuid", syscall.Setresuid(100, 100, 100))
	fmt.Printf("uid=%d\n", os.Getuid())
}
