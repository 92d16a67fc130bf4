package systemd

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/strata-dev/strata/manifests"
)

// showOutput is `systemctl show -p showProperties -- rsyslog.service
// getty@tty1.service multi-user.target nope.service` from systemd 252:
// properties in D-Bus order, Type and MainPID absent for a target.
const showOutput = `Type=notify
MainPID=130
Id=rsyslog.service
Names=rsyslog.service syslog.service
LoadState=loaded
ActiveState=active
SubState=running
RefuseManualStart=no
RefuseManualStop=no
CanReload=no

Type=idle
MainPID=180
Id=getty@tty1.service
Names=getty@tty1.service
LoadState=loaded
ActiveState=active
SubState=running
RefuseManualStart=no
RefuseManualStop=no
CanReload=no

Id=multi-user.target
Names=multi-user.target
LoadState=loaded
ActiveState=active
SubState=active
RefuseManualStart=no
RefuseManualStop=no
CanReload=no

Type=simple
MainPID=0
Id=nope.service
Names=nope.service
LoadState=not-found
ActiveState=inactive
SubState=dead
RefuseManualStart=no
RefuseManualStop=no
CanReload=no
`

func TestParseShow(t *testing.T) {
	got, err := parseShow(showOutput)
	if err != nil {
		t.Fatal(err)
	}
	want := []Unit{
		{ID: "rsyslog.service", Names: []string{"rsyslog.service", "syslog.service"}, LoadState: "loaded", ActiveState: "active", SubState: "running", Type: "notify", MainPID: 130},
		{ID: "getty@tty1.service", Names: []string{"getty@tty1.service"}, LoadState: "loaded", ActiveState: "active", SubState: "running", Type: "idle", MainPID: 180},
		{ID: "multi-user.target", Names: []string{"multi-user.target"}, LoadState: "loaded", ActiveState: "active", SubState: "active"},
		{ID: "nope.service", Names: []string{"nope.service"}, LoadState: "not-found", ActiveState: "inactive", SubState: "dead", Type: "simple"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseShow:\n got %+v\nwant %+v", got, want)
	}
}

func TestParseShowOdd(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []Unit
	}{
		{"empty", "", nil},
		{"only blank lines", "\n\n\n", nil},
		{"CRLF and extra blank lines", "\n\nId=a.service\r\nRefuseManualStop=yes\r\n\n\n\nId=b.service\n", []Unit{
			{ID: "a.service", RefuseManualStop: true}, {ID: "b.service"}}},
		{"escaped name kept", `Id=dev-disk-by\x2duuid-1.device` + "\n", []Unit{{ID: `dev-disk-by\x2duuid-1.device`}}},
		{"odd Id dropped, record kept apart", "Id=evil;rm -rf.service\nMainPID=1\n\nId=ok.service\n", []Unit{{ID: "ok.service"}}},
		{"Id with option shape dropped", "Id=--force.service\n", nil},
		{"bad alias names dropped", "Id=a.service\nNames=a.service -b.service c d.service $(x).service\n", []Unit{
			{ID: "a.service", Names: []string{"a.service", "d.service"}}}},
		{"quoted escaped alias (systemd 252)", "Id=x\\x2dy.service\nNames=\"x\\\\x2dy.service\" b.service \"c d.service\" \"unterminated\n",
			[]Unit{{ID: `x\x2dy.service`, Names: []string{`x\x2dy.service`, "b.service"}}}},
		{"value with '='", "Id=a.service\nSubState=x=y\n", []Unit{{ID: "a.service", SubState: "x=y"}}},
		{"unknown keys ignored", "Id=a.service\nFoo=bar\nExecStart={ path=/bin/x ; }\n", []Unit{{ID: "a.service"}}},
		{"missing fields are zero", "Id=a.service\n", []Unit{{ID: "a.service"}}},
		{"later Id wins", "Id=a.service\nId=b.service\n", []Unit{{ID: "b.service"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseShow(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseShowErrors(t *testing.T) {
	for _, in := range []string{
		"no equals sign\n",
		"MainPID=12\n",                  // no Id
		"Id=a.service\n\nType=simple\n", // second record without Id
		"Id=a.service\nMainPID=x\n",
		"Id=a.service\nMainPID=-1\n",
		"Id=a.service\nMainPID=99999999999999999999\n",
		"Id=a.service\nRefuseManualStop=maybe\n",
		"Id=a.service\nCanReload=\n",
	} {
		if _, err := parseShow(in); !errors.Is(err, ErrParse) {
			t.Errorf("parseShow(%q) = %v, want ErrParse", in, err)
		}
	}
}

func TestParseShowLong(t *testing.T) {
	var b strings.Builder
	for i := 0; i < 20000; i++ {
		b.WriteString("Id=u" + strings.Repeat("x", 200) + ".service\nNames=" + strings.Repeat("a.service ", 50) + "\nMainPID=7\n\n")
	}
	b.WriteString("Id=last.service\nSubState=" + strings.Repeat("s", 1<<20) + "\n")
	got, err := parseShow(b.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 20001 || got[20000].ID != "last.service" || len(got[0].Names) != 50 || got[0].MainPID != 7 {
		t.Errorf("got %d units, last %q", len(got), got[len(got)-1].ID)
	}
}

func TestParseListUnits(t *testing.T) {
	in := "cron.service                 loaded active running Regular background program processing daemon\n" +
		"● ntpsec.service loaded failed failed Network Time Service\n" +
		`dev-disk-by\x2duuid-1.device loaded active plugged /dev/disk/by-uuid/1` + "\n" +
		"exim4.service not-found inactive dead exim4.service\n" +
		"\n   \n" +
		"weird name.service loaded active running x\n" +
		"-rf loaded active running x\n"
	// "weird" has no unit type suffix and "-rf" looks like an option: dropped.
	want := []string{"cron.service", "ntpsec.service", `dev-disk-by\x2duuid-1.device`, "exim4.service"}
	if got := parseListUnits(in); !reflect.DeepEqual(got, want) {
		t.Errorf("parseListUnits = %q, want %q", got, want)
	}
}

func FuzzParseShow(f *testing.F) {
	f.Add(showOutput)
	f.Add("Id=a.service\nNames=a.service b.service\nMainPID=1\n\n\nId=c.service\n")
	f.Add("Id=\n")
	f.Fuzz(func(t *testing.T, in string) {
		units, err := parseShow(in)
		if err != nil {
			if !errors.Is(err, ErrParse) {
				t.Fatalf("error %v is not ErrParse", err)
			}
			return
		}
		for _, u := range units {
			if !manifests.ValidUnit(u.ID) || u.MainPID < 0 {
				t.Fatalf("parsed invalid unit %+v", u)
			}
			for _, n := range u.Names {
				if !manifests.ValidUnit(n) {
					t.Fatalf("parsed invalid alias %q", n)
				}
			}
		}
	})
}
