package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// manDate is the date the generated man pages carry unless
// $SOURCE_DATE_EPOCH says otherwise: pages generated twice are the same.
var manDate = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// newGenManCmd is the hidden command make man runs: a man page per
// command of the tree, generated from it.
func newGenManCmd(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:    "gen-man DIR",
		Short:  "Write a man page (section 1) per command into DIR",
		Hidden: true,
		Args:   args(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, a []string) error {
			date := manDate
			if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
				var sec int64
				if _, err := fmt.Sscan(s, &sec); err != nil {
					return usageError{fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a number", s)}
				}
				date = time.Unix(sec, 0).UTC()
			}
			if err := os.MkdirAll(a[0], 0o755); err != nil {
				return err
			}
			root.DisableAutoGenTag = true
			hdr := &doc.GenManHeader{Title: "STRATA", Section: "1", Source: "strata", Manual: "strata manual", Date: &date}
			return doc.GenManTree(root, hdr, a[0])
		},
	}
}
