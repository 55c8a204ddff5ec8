package layout

import (
	"strings"
	"testing"
)

// TestManifestDocument: what .pugmark/manifest.json shows. §4.1: IDs are
// emitted in lower case whatever case a writer stored; §18: fields this
// version does not know are shown, in the order they were written.
func TestManifestDocument(t *testing.T) {
	const (
		id  = "00079d471234567890abcdef12345678"
		par = "00079d46aaaaaaaabbbbbbbbcccccccc"
	)
	up := strings.ToUpper
	for _, c := range []struct {
		name   string
		stored string
		want   string
	}{
		{
			name:   "upper-case IDs are lowered",
			stored: `{"session":"` + up(id) + `","parent":{"session":"` + up(par) + `","version":3},"first-sequence-number":1}`,
			want:   "{\n  \"session\": \"" + id + "\",\n  \"parent\": {\n    \"session\": \"" + par + "\",\n    \"version\": 3\n  },\n  \"first-sequence-number\": 1\n}\n",
		},
		{
			name:   "unknown fields keep their place; a session elsewhere is not an ID",
			stored: `{"zz":{"session":"KEEP"},"session":"` + id + `","metadata":{"session":"` + up(par) + `"},"future":[1,"session"]}`,
			want:   "{\n  \"zz\": {\n    \"session\": \"KEEP\"\n  },\n  \"session\": \"" + id + "\",\n  \"metadata\": {\n    \"session\": \"" + up(par) + "\"\n  },\n  \"future\": [\n    1,\n    \"session\"\n  ]\n}\n",
		},
		{
			name:   "strings are shown as written",
			stored: `{"session":"` + id + `","name":"caf\u00e9 \ud83d\ude00","agent":"a\/b"}`,
			want:   "{\n  \"session\": \"" + id + "\",\n  \"name\": \"caf\\u00e9 \\ud83d\\ude00\",\n  \"agent\": \"a\\/b\"\n}\n",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := DecodeManifest([]byte(c.stored))
			if err != nil {
				t.Fatal(err)
			}
			m.Stored = []byte(c.stored)
			got, err := m.Document()
			if err != nil || string(got) != c.want {
				t.Fatalf("Document() = %q, %v\nwant %q", got, err, c.want)
			}
		})
	}
	// Built in memory: encoded from its fields.
	sid, _ := ParseSessionID(id)
	got, err := (&Manifest{Session: sid, FirstSequenceNumber: 5}).Document()
	if want := "{\n  \"session\": \"" + id + "\",\n  \"first-sequence-number\": 5\n}\n"; err != nil || string(got) != want {
		t.Fatalf("in-memory Document() = %q, %v; want %q", got, err, want)
	}
}
