package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// reporter shows progress on standard error. On a terminal, chatter from
// long steps (debootstrap's and run steps' output) and sized steps (a
// progress bar) share one status line that is rewritten in place; other
// lines are printed above it. Elsewhere every line is printed plainly and
// the bar is left out (the library still sends a line every tenth).
type reporter struct {
	mu     sync.Mutex
	w      io.Writer
	tty    bool
	width  int
	status bool // a status line is on screen
}

func newReporter(f *os.File) *reporter {
	r := &reporter{w: f, width: 80}
	if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err == nil {
		r.tty = true
		if ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ); err == nil && ws.Col > 20 {
			r.width = int(ws.Col)
		}
	}
	return r
}

// transient reports whether a progress line is chatter that a terminal
// shows only until the next one.
func transient(s string) bool {
	return strings.HasPrefix(s, "debootstrap: ") || strings.HasPrefix(s, "run: ") || strings.HasPrefix(s, "writing image: ")
}

// line reports one progress line. Progress may carry what a node or a
// recipe's command said: it is printed without control characters.
func (r *reporter) line(s string) {
	s = printable(strings.ReplaceAll(s, "\t", " "))
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tty && transient(s) {
		if strings.HasPrefix(s, "writing image: ") {
			return // the bar shows it
		}
		r.show(s)
		return
	}
	r.clear()
	fmt.Fprintln(r.w, "strata:", s)
}

// fraction draws a progress bar on a terminal.
func (r *reporter) fraction(what string, done, total int64) {
	if !r.tty || total <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	pc := done * 100 / total
	label := fmt.Sprintf("%s %3d%% of %d MiB ", what, pc, total>>20)
	n := r.width - len(label) - len("strata: []") - 1
	if n < 10 {
		n = 10
	}
	fill := int(int64(n) * done / total)
	r.show(label + "[" + strings.Repeat("=", fill) + strings.Repeat(" ", n-fill) + "]")
	if done >= total {
		r.clear()
	}
}

// show rewrites the status line with s, cut to the terminal's width.
func (r *reporter) show(s string) {
	s = "strata: " + strings.Map(func(c rune) rune {
		if c < ' ' {
			return ' '
		}
		return c
	}, s)
	if len(s) > r.width-1 {
		s = s[:r.width-1]
	}
	fmt.Fprintf(r.w, "\r\033[K%s", s)
	r.status = true
}

// clear removes the status line, if any.
func (r *reporter) clear() {
	if r.status {
		fmt.Fprint(r.w, "\r\033[K")
		r.status = false
	}
}

// finish clears the status line at the end of a command.
func (r *reporter) finish() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clear()
}
