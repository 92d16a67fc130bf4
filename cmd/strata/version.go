package main

import (
	"fmt"
	"io"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// stampedRevision is the VCS revision the Makefile stamps in (git
// describe), used when Go recorded none.
var stampedRevision string

// buildInfo is what strata version reports.
type buildInfo struct {
	Module    string `json:"module"`
	Version   string `json:"version"`
	Revision  string `json:"revision,omitempty"`
	Time      string `json:"time,omitempty"`
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"go_version"`
}

func newVersionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print strata's version and the revision it was built from",
		Long:    "Print the module version and the VCS revision of this binary, from the build information Go records in it.",
		Example: "  strata version\n  strata --json version",
		Args:    args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			bi := readBuildInfo()
			return g.output(c.OutOrStdout(), bi, func(w io.Writer) {
				fmt.Fprintf(w, "strata %s", bi.Version)
				if bi.Revision != "" {
					fmt.Fprintf(w, " (revision %s", bi.Revision)
					if bi.Modified {
						fmt.Fprint(w, ", modified")
					}
					if bi.Time != "" {
						fmt.Fprintf(w, ", %s", bi.Time)
					}
					fmt.Fprint(w, ")")
				}
				fmt.Fprintf(w, " %s\n", bi.GoVersion)
			})
		},
	}
}

func readBuildInfo() (bi buildInfo) {
	bi = buildInfo{Module: "github.com/strata-dev/strata", Version: "(unknown)"}
	defer func() {
		if bi.Revision == "" {
			bi.Revision = stampedRevision
		}
	}()
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return bi
	}
	bi.Module, bi.Version, bi.GoVersion = info.Main.Path, info.Main.Version, info.GoVersion
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			bi.Revision = s.Value
		case "vcs.time":
			bi.Time = s.Value
		case "vcs.modified":
			bi.Modified = s.Value == "true"
		}
	}
	return bi
}
