package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestReporterPlainLinesOffTerminal(t *testing.T) {
	var b bytes.Buffer
	r := &reporter{w: &b, width: 80}
	r.line("debootstrap: I: Retrieving libc6")
	r.fraction("writing image", 50, 100)
	r.line("writing image: 10% of 1 MiB")
	r.finish()
	want := "strata: debootstrap: I: Retrieving libc6\nstrata: writing image: 10% of 1 MiB\n"
	if b.String() != want {
		t.Fatalf("off a terminal got %q, want %q", b.String(), want)
	}
}

func TestReporterStatusLineOnTerminal(t *testing.T) {
	var b bytes.Buffer
	r := &reporter{w: &b, width: 60, tty: true}
	r.line("run: Setting up nginx")
	r.line("writing image: 10% of 1 MiB") // the bar shows this
	r.fraction("writing image", 50, 100)
	r.line("wrote out/x.image.json")
	out := b.String()
	for _, want := range []string{
		"\r\033[Kstrata: run: Setting up nginx",
		"\r\033[Kstrata: writing image  50% of 0 MiB [",
		"\r\033[Kstrata: wrote out/x.image.json\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("terminal output %q lacks %q", out, want)
		}
	}
	if strings.Contains(out, "10% of 1 MiB") {
		t.Errorf("terminal output %q repeats the tenth lines the bar replaces", out)
	}
	for _, l := range strings.Split(out, "\r") {
		if len(l) > 60+len("\033[K") {
			t.Errorf("status line %q is wider than the terminal", l)
		}
	}
}
