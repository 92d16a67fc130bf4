package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/builder/disk"
	"github.com/strata-dev/strata/internal/catalog"
	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/node"

	// The node backends register themselves: the engine imports none.
	_ "github.com/strata-dev/strata/internal/nodestate/backends"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/scratch"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/overlay"
)

// Exit codes; keep in sync with exitHelp and docs/cli.md.
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitRejected = 3
	exitLocked   = 4
	exitRestart  = 5
)

const exitHelp = `Exit codes:
  0  success (verify-sequence: no problem found)
  1  error (I/O, missing tool, unexpected failure)
  2  usage error (bad flags or arguments)
  3  rejected: verification failed or the audit found a problem
     (signature, sequence, tampering, drift, unsafe path, bad recipe)
  4  the node is locked by another strata process
  5  a service restart failed (apply-overlay: the overlay was taken back;
     rollback, restart-pending: the node changed, the restart did not)
  130, 143, 129  interrupted by SIGINT, SIGTERM or SIGHUP (locks
     released, the node consistent: a change not committed is taken back)`

func main() {
	// SIGINT, SIGTERM and SIGHUP cancel the command's context: every
	// command then stops where it is safe to, releases its locks, removes
	// its temporary files and exits 128 + the signal (130, 143, 129). A second
	// signal is not caught: it kills at once (the node's recovery then
	// settles what a crash leaves), except in the re-executed child below.
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 1)
	// SIGHUP too: a closed terminal (or SSH session) ends the command as
	// cleanly as Ctrl-C would.
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	// The process strata re-executes itself as for offline disk work (in
	// a private mount namespace) stops cleanly however many signals come:
	// its parent's death is signalled once for each of the parent's
	// threads (Pdeathsig), and Ctrl-C reaches it besides the SIGTERM its
	// parent then sends. Only SIGKILL stops it at once.
	child := disk.InPrivateNamespace()
	go func() {
		for s := range sigs {
			if s == os.Interrupt && editorRunning.Load() {
				// Ctrl-C reaches the whole foreground group: while an
				// editor runs it is the editor's (as git does).
				continue
			}
			if interruptedBy.CompareAndSwap(0, int32(s.(syscall.Signal))) {
				cancel()
			}
			if !child {
				signal.Stop(sigs)
				return
			}
		}
	}()
	code := run(ctx, os.Args[1:])
	// A command that finished before the signal could stop it succeeded;
	// one that failed after it was interrupted (run says so).
	if s := interruptedBy.Load(); s != 0 && code != exitOK {
		code = 128 + int(s)
	}
	os.Exit(code)
}

// signalName names the signals strata stops on.
func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return "SIGTERM"
}

// staleAfter is how old an unlocked working directory must be before a
// run removes it.
const staleAfter = 10 * time.Minute

// editorRunning is set while config edit's editor has the terminal.
var editorRunning atomic.Bool

// interruptedBy is the signal that cancelled the command (0: none).
var interruptedBy atomic.Int32

func run(ctx context.Context, args []string) int {
	// Working directories a killed run left (strata-disk-*, -upgrade-*,
	// ...) go first; those in use are locked and stay.
	if removed, _ := scratch.Sweep(staleAfter); len(removed) > 0 {
		fmt.Fprintf(os.Stderr, "strata: removed %d working directories killed runs left behind: %s\n", len(removed), strings.Join(removed, " "))
	}
	cmd := newRoot()
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	if stderrReporter != nil {
		stderrReporter.finish()
	}
	if err == nil {
		return exitOK
	}
	var ae auditFailed
	if errors.As(err, &ae) {
		return exitRejected // the report is already printed
	}
	var ce childExit
	if errors.As(err, &ce) {
		return ce.code // the child (--disk) printed its own output
	}
	if isCobraUsage(err) || strings.Contains(err.Error(), "invalid argument") {
		err = plainUnknownCommand(cmd, plainFlagError(err))
	}
	code := exitCode(err)
	var ue usageError
	if errors.As(err, &ue) || isCobraUsage(err) || errors.Is(err, node.ErrUnknownUnit) || errors.Is(err, overlay.ErrUnknownOwner) || errors.Is(err, sign.ErrSecretKey) || errors.Is(err, node.ErrRollbackTarget) || errors.Is(err, overlay.ErrAmbiguousLine) || errors.Is(err, builder.ErrNeedKey) || errors.Is(err, overlay.ErrRotation) || errors.Is(err, repo.ErrRemote) || errors.Is(err, repo.ErrLocation) {
		code = exitUsage
	}
	if s := interruptedBy.Load(); s != 0 && ctx.Err() != nil {
		// Whatever the step that stopped says (a tool killed, a read
		// cancelled), the command was interrupted.
		// The cancellation is why; where it stopped is the message.
		msg := strings.TrimRight(strings.ReplaceAll(err.Error(), ": "+context.Canceled.Error(), ""), ": ")
		err, code = fmt.Errorf("interrupted by %s: %s", signalName(syscall.Signal(s)), msg), 128+int(s)
	}
	if wantsJSON(args) {
		// Automation gets errors in the same shape as results.
		b, _ := json.Marshal(map[string]any{"error": err.Error(), "exit_code": code})
		fmt.Fprintln(os.Stderr, string(b))
	} else {
		fmt.Fprintln(os.Stderr, "strata:", errorLines(err.Error()))
	}
	return code
}

// errorLines is an error message as the terminal shows it: control
// characters escaped (escapeControl), line breaks included, except the
// ones that start a line of a command's output quoted in it
// (catalog.OutputLine), which print as lines, marked as quoted: no text
// from outside can pass for a line of strata's own.
func errorLines(s string) string {
	parts := strings.Split(s, catalog.OutputLine)
	for i, p := range parts {
		parts[i] = escapeControl(p)
	}
	return strings.Join(parts, catalog.OutputLine)
}

// escapeControl writes the control and format characters of s (which
// may quote what came from outside: an argument, a file name) as Go
// escapes, so an error message cannot drive the terminal or hide text.
func escapeControl(s string) string {
	var b strings.Builder
	for _, r := range s {
		if manifests.IsControl(r) {
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// wantsJSON reports whether --json was given (parsed or not: a usage
// error may come before flags are parsed).
func wantsJSON(args []string) bool {
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "--json" || a == "--json=true" {
			return true
		}
	}
	return false
}

// exitCode maps an error to the process's exit status: the node lock and a
// failed restart first, then the class of errors that reject an input
// (manifests.ErrRejected: signatures, sequence, tampering, unsafe paths,
// bad recipes, ...), else a plain error.
func exitCode(err error) int {
	switch {
	case errors.Is(err, nodestate.ErrLocked):
		return exitLocked
	case errors.Is(err, node.ErrRestart):
		return exitRestart
	case errors.Is(err, manifests.ErrRejected):
		return exitRejected
	}
	return exitError
}

// usageError marks errors in how strata was called.
type usageError struct{ error }

// auditFailed marks a verify-sequence run whose report was printed and
// that found problems.
type auditFailed struct{ error }

// isCobraUsage recognises cobra's own argument errors, which carry no type.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, s := range []string{"required flag(s)", "unknown command", "unknown flag", "unknown shorthand flag", "flag needs an argument"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
