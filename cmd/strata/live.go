package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/strata-dev/strata/internal/systemd"
)

// printLive shows a plan as the running systemd resolved it.
func printLive(w io.Writer, r *systemd.Resolved) {
	if r == nil {
		return
	}
	fmt.Fprintln(w, "  on the running system:")
	if r.DaemonReexec {
		fmt.Fprintf(w, "    daemon-reexec (systemd's own files changed: /%s)\n", strings.Join(r.ReexecBecause, ", /"))
	} else if r.DaemonReload {
		fmt.Fprintln(w, "    daemon-reload")
	}
	for _, s := range r.Steps {
		also := ""
		if len(s.Also) > 0 {
			also = " (also " + strings.Join(s.Also, ", ") + ")"
		}
		fmt.Fprintf(w, "    %-22s %s%s\n", s.Action, s.Unit, also)
	}
	for _, h := range r.Deferred {
		fmt.Fprintf(w, "    reboot required        %s (%s)\n", h.Unit, h.Reason)
	}
	if n := len(r.Skipped); n > 0 {
		reasons := map[systemd.Reason]int{}
		for _, h := range r.Skipped {
			reasons[h.Reason]++
		}
		var parts []string
		for _, reason := range []systemd.Reason{systemd.ReasonInactive, systemd.ReasonNoProcess, systemd.ReasonNoInstances, systemd.ReasonNotLoaded, systemd.ReasonAlias, systemd.ReasonAliasStop, systemd.ReasonInvalidName} {
			if c := reasons[reason]; c > 0 {
				parts = append(parts, fmt.Sprintf("%d %s", c, reason))
			}
		}
		fmt.Fprintf(w, "    skipped %d: %s\n", n, strings.Join(parts, ", "))
	}
}
