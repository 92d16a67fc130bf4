package manifests_test

import (
	"testing"

	"github.com/strata-dev/strata/manifests"
)

func imageSeed(t interface{ Fatal(...any) }) []byte {
	b, err := manifests.Encode(validImage())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzDecodeImageManifest feeds arbitrary bytes to Decode and, when they
// decode, to Validate: neither may panic, and a manifest that validates
// must re-encode to a document that decodes and validates again.
func FuzzDecodeImageManifest(f *testing.F) {
	f.Add(imageSeed(f))
	f.Add([]byte(`{"schema":1,"kind":"image","line":"demo","version":"1.0.0","tree_digest":"sha256:","files":[{"path":"a","type":"symlink","target":"../x"}]}`))
	f.Add([]byte(`{"schema":1,"kind":"image","base":{"version":"1.0.0","digest":""},"files":null}`))
	f.Add([]byte(`{"files":[{"path":"a","type":"file","mode":"7777","uid":-1}]}`))
	f.Add([]byte(`{} {}`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m manifests.ImageManifest
		if err := manifests.Decode(b, &m); err != nil {
			return
		}
		if err := m.Validate(); err != nil {
			return
		}
		out, err := manifests.Encode(&m)
		if err != nil {
			t.Fatalf("valid manifest does not encode: %v", err)
		}
		var back manifests.ImageManifest
		if err := manifests.Decode(out, &back); err != nil {
			t.Fatalf("re-encoded manifest does not decode: %v\n%s", err, out)
		}
		if err := back.Validate(); err != nil {
			t.Fatalf("re-encoded manifest does not validate: %v\n%s", err, out)
		}
	})
}

// FuzzDecodeOverlay does the same for overlay manifests (make fuzz runs it).
func FuzzDecodeOverlay(f *testing.F) {
	b, err := manifests.Encode(validOverlay())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"schema":1,"kind":"overlay","lineage":[],"deletes":["a","a"]}`))
	// Ambiguous names (issue 7): twice, and differing only in case.
	f.Add([]byte(`{"schema":1,"kind":"overlay","version":"1.0.1","version":"2.0.0"}`))
	f.Add([]byte(`{"schema":1,"kind":"overlay","entries":[],"ENTRIES":[{"path":"a","type":"file","mode":"4755"}]}`))
	f.Add([]byte(`{"\u212aind":"overlay","catalog":{"services":[{"unit":"a.service","Unit":"b.service"}]}}`))
	// Key rotations (issue 7): valid, and with keys that are not keys.
	if b, err = manifests.Encode(validRotation(f)); err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"schema":1,"kind":"overlay","keys":{"add":["RWQ=","` + testPub(1) + `"],"revoke":["../x",""],"Add":[]},"entries":[{"path":"usr/lib/strata/keys/0000000000000001.pub","type":"symlink","target":"/"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m manifests.OverlayManifest
		if err := manifests.Decode(b, &m); err != nil {
			return
		}
		if err := m.Validate(); err != nil {
			return
		}
		m.Ancestors(m.Parent.Version)
		m.Ancestors("0.0.0")
		if m.Keys != nil {
			for _, pub := range m.Keys.Add {
				if _, err := manifests.KeyFile(pub); err != nil {
					t.Fatalf("a validated rotation adds %q, which is no key: %v", pub, err)
				}
			}
		}
	})
}

// FuzzDecodeIndex decodes and validates arbitrary repository indexes and
// ledgers (make fuzz runs it): strict decoding, freshness fields, sizes
// and the ledger's field checks never panic, and what validates encodes
// and decodes back to a document that validates.
func FuzzDecodeIndex(f *testing.F) {
	f.Add([]byte(`{"schema":1,"kind":"index","serial":3,"expires":"2027-01-01T00:00:00Z","lines":[{"name":"demo","image":{"version":"1.0.0","file":"i","digest":"d","sha256":"s","size":1},"overlays":[]}]}`))
	f.Add([]byte(`{"schema":1,"kind":"index","serial":1,"serial":9,"expires":"x","lines":[]}`))
	f.Add([]byte(`{"schema":1,"kind":"ledger","entries":[{"seq":0,"action":"provision","line":"demo","version":"1.0.0","pending":[{"unit":"--x","action":"restart"}]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var x manifests.Index
		if err := manifests.Decode(b, &x); err == nil && x.Validate() == nil {
			out, err := manifests.Encode(&x)
			if err != nil {
				t.Fatal(err)
			}
			var back manifests.Index
			if err := manifests.Decode(out, &back); err != nil || back.Validate() != nil {
				t.Fatalf("re-encoded index does not decode or validate: %v\n%s", err, out)
			}
		}
		var l manifests.Ledger
		if err := manifests.Decode(b, &l); err == nil {
			_ = l.CheckChain()
			_ = l.PendingRestarts()
		}
	})
}
