package testnode

import (
	"reflect"
	"testing"
)

func TestParseShow(t *testing.T) {
	out := "Id=nginx.service\nLoadState=loaded\nActiveState=active\nSubState=running\nMainPID=61\n" +
		"InvocationID=d79eda96\nExecMainStartTimestamp=Mon 2026-11-30 23:25:09 UTC\nExecMainStartTimestampMonotonic=498972190\nNRestarts=0\n\n" +
		"Id=x.service\nLoadState=not-found\nActiveState=inactive\nSubState=dead\nMainPID=0\nInvocationID=\n" +
		"ExecMainStartTimestamp=\nExecMainStartTimestampMonotonic=0\nNRestarts=0\n"
	got, err := parseShow(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []UnitState{
		{Name: "nginx.service", LoadState: "loaded", ActiveState: "active", SubState: "running", MainPID: 61, InvocationID: "d79eda96",
			ExecMainStartTimestamp: "Mon 2026-11-30 23:25:09 UTC", ExecMainStartTimestampMonotonic: 498972190},
		{Name: "x.service", LoadState: "not-found", ActiveState: "inactive", SubState: "dead"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseShow = %+v\nwant %+v", got, want)
	}
	for _, bad := range []string{"no equals sign\n", "MainPID=x\nId=a\n", "ActiveState=active\n"} {
		if _, err := parseShow(bad); err == nil {
			t.Errorf("parseShow(%q) succeeded", bad)
		}
	}
}

func TestDeadOwner(t *testing.T) {
	for name, want := range map[string]bool{"1-a-b": false, "x-a": false, "2147483646-n-1": true, "": false} {
		if got := deadOwner(name); got != want {
			t.Errorf("deadOwner(%q) = %v, want %v", name, got, want)
		}
	}
}
