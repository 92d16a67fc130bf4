package main

import (
	"fmt"
	"regexp"
	"testing"

	"golang.org/x/sys/unix"
)

// The agent's log lines carry the time, unless they go to the journal,
// which stamps them itself (JOURNAL_STREAM naming stderr).
func TestAgentLogStamps(t *testing.T) {
	var got []string
	line := func(s string) { got = append(got, s) }
	agentLog(line, false)("config ok: polling x")
	agentLog(line, true)("config ok: polling x")
	if len(got) != 2 || !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ config ok: polling x$`).MatchString(got[0]) || got[1] != "config ok: polling x" {
		t.Errorf("log lines %q, want the first stamped and the journal's not", got)
	}
	agentLog(nil, false)("silent") // --json: no log, no panic

	var st unix.Stat_t
	if err := unix.Fstat(2, &st); err != nil {
		t.Fatal(err)
	}
	t.Setenv("JOURNAL_STREAM", fmt.Sprintf("%d:%d", st.Dev, st.Ino))
	if !journalStderr() {
		t.Error("JOURNAL_STREAM naming stderr is not the journal")
	}
	t.Setenv("JOURNAL_STREAM", fmt.Sprintf("%d:%d", st.Dev, st.Ino+1))
	if journalStderr() {
		t.Error("JOURNAL_STREAM naming another file is the journal")
	}
	t.Setenv("JOURNAL_STREAM", "")
	if journalStderr() {
		t.Error("no JOURNAL_STREAM is the journal")
	}
}
