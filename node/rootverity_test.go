package node

import (
	"strings"
	"testing"
)

func TestJudgeRoot(t *testing.T) {
	const h = "4a58857280d687ba42b42b625b0641b5fabad2ad0b9b6160076a7fef69120d0a"
	for _, c := range []struct {
		name, dm, uuid, cmdline, mode, note string
	}{
		{"verified", "strata-root", "CRYPT-VERITY-0a1b-strata-root", "root=PARTUUID=x strata.verity=" + h + " ro", RootVerified, ""},
		{"hash but the partition itself", "", "", "root=PARTUUID=x strata.verity=" + h, RootUnverified, "does not open it"},
		{"another dm device", "other", "CRYPT-VERITY-0a1b-other", "strata.verity=" + h, RootUnverified, "does not open it"},
		{"the name on a linear device", "strata-root", "", "strata.verity=" + h, RootUnverified, "does not open it"},
		{"the device but no hash", "strata-root", "CRYPT-VERITY-0a1b-strata-root", "root=PARTUUID=x ro", RootUnverified, "names no root hash"},
		{"neither", "", "", "root=PARTUUID=x ro", RootUnverified, "names no root hash"},
	} {
		ri := judgeRoot("254:0", c.dm, c.uuid, c.cmdline)
		if ri.Mode != c.mode || !strings.Contains(ri.Note, c.note) || (c.mode == RootVerified) != (ri.Note == "") {
			t.Errorf("%s: %+v", c.name, ri)
		}
		if strings.Contains(c.cmdline, h) && ri.RootHash != h {
			t.Errorf("%s: root hash %q", c.name, ri.RootHash)
		}
	}
}
