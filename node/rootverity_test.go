package node

import (
	"strings"
	"testing"
)

func TestJudgeRoot(t *testing.T) {
	const h = "4a58857280d687ba42b42b625b0641b5fabad2ad0b9b6160076a7fef69120d0a"
	for _, c := range []struct {
		name, dm, cmdline, mode, note string
	}{
		{"verified", "strata-root", "root=PARTUUID=x strata.verity=" + h + " ro", RootVerified, ""},
		{"hash but the partition itself", "", "root=PARTUUID=x strata.verity=" + h, RootUnverified, "does not open it"},
		{"another dm device", "other", "strata.verity=" + h, RootUnverified, "does not open it"},
		{"the device but no hash", "strata-root", "root=PARTUUID=x ro", RootUnverified, "names no root hash"},
		{"neither", "", "root=PARTUUID=x ro", RootUnverified, "names no root hash"},
	} {
		ri := judgeRoot("254:0", c.dm, c.cmdline)
		if ri.Mode != c.mode || !strings.Contains(ri.Note, c.note) || (c.mode == RootVerified) != (ri.Note == "") {
			t.Errorf("%s: %+v", c.name, ri)
		}
		if strings.Contains(c.cmdline, h) && ri.RootHash != h {
			t.Errorf("%s: root hash %q", c.name, ri.RootHash)
		}
	}
}
