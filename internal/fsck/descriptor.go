package fsck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/pugmark/pugfs/layout"
)

// decodeArray decodes a snapshot or memory file body (§6.2, §8.2): zstd
// at rest, a JSON array. It returns the raw elements so that one bad
// descriptor is one finding, not a lost file; ok is false when the body is
// not an array at all.
func (c *checker) decodeArray(o *object, rule, kind string) (elems []json.RawMessage, ok bool) {
	if layout.Sniff(o.body) != layout.EncodingZstd {
		c.errorf(rule, o.key, "%s body is not zstd-compressed (no zstd magic)", kind)
	}
	// Decode as readers do: by sniffing, so a plain JSON body is still
	// checked further.
	js, err := layout.DecodeBody(o.body, "", layout.DefaultMaxDecoded)
	if err != nil {
		c.errorf(rule, o.key, "%s body does not decode: %v", kind, oneLine(err))
		return nil, false
	}
	if err := json.Unmarshal(js, &elems); err != nil {
		c.errorf(rule, o.key, "%s is not a JSON array: %v", kind, oneLine(err))
		return nil, false
	}
	if elems == nil && !bytes.Equal(bytes.TrimSpace(js), []byte("[]")) {
		c.errorf(rule, o.key, "%s is JSON null, not an array", kind)
		return nil, false
	}
	return elems, true
}

// decodeDescriptor decodes one element. When the descriptor is malformed
// it still tries to recover the sequence number, so one bad field does not
// also break the §7.3 continuity check. A descriptor that decodes with
// damage (layout.Damage: the mount serves the rest of its snapshot) is
// malformed all the same.
func decodeDescriptor(raw json.RawMessage) (d layout.Descriptor, seq int64, seqOK bool, err error) {
	if err = json.Unmarshal(raw, &d); err == nil {
		if d.Damage != nil {
			return d, d.SequenceNumber, true, d.Damage
		}
		return d, d.SequenceNumber, true, nil
	}
	var s struct {
		Seq *json.Number `json:"sequence-number"`
	}
	if json.Unmarshal(raw, &s) == nil {
		if s.Seq == nil {
			return d, 0, true, err // omitted means 0 (decisions.md)
		}
		if n, perr := strconv.ParseInt(string(*s.Seq), 10, 64); perr == nil {
			return d, n, true, err
		}
	}
	return d, 0, false, err
}

// upperHexDigest reports whether a stored descriptor's digest has
// upper-case hex digits (§3 keys are lower-case; pugfs reads either).
// Most descriptors have none, and are not decoded a second time.
func upperHexDigest(raw json.RawMessage) bool {
	i := bytes.Index(raw, []byte(`"sha256:`))
	if i < 0 || !bytes.ContainsAny(raw[i:min(len(raw), i+72)], "ABCDEF") {
		return false
	}
	var s struct {
		Digest string `json:"digest"`
	}
	if json.Unmarshal(raw, &s) != nil {
		return false
	}
	hex, ok := strings.CutPrefix(s.Digest, "sha256:")
	return ok && hex != strings.ToLower(hex)
}

// descWhere names a descriptor in messages: its index and name.
func descWhere(kind string, i int, d *layout.Descriptor) string {
	if d.Name == "" {
		return fmt.Sprintf("%s %d", kind, i)
	}
	return fmt.Sprintf("%s %d (%q)", kind, i, d.Name)
}

// checkDescriptor checks what a descriptor must satisfy wherever it
// appears (snapshot or memory file): tombstone shape (§10), the blob it
// references (§3, §7), inline data (§3.1, §7.1, decisions.md), content
// encoding (§15) and its name as a path (decisions.md "Names as paths").
// It counts the reference on the blob. raw is the descriptor as stored.
func (c *checker) checkDescriptor(key, where string, d *layout.Descriptor, raw json.RawMessage) {
	if upperHexDigest(raw) {
		c.warnf("§7", key, "%s: digest %s is written in upper-case hex; readers accept it, but blob keys and other writers use lower case", where, d.Digest)
	}
	switch d.ContentEncoding {
	case layout.EncodingNone, "identity", layout.EncodingGzip, layout.EncodingZstd:
	default:
		c.errorf("§15", key, "%s: content-encoding %q; want empty, gzip or zstd", where, d.ContentEncoding)
	}
	if !utf8.ValidString(d.Name) {
		c.errorf("§7", key, "%s: the name %q holds bytes that are not UTF-8, which JSON cannot carry (RFC 8259 §8.1): encoding/json reads each as U+FFFD, so two such names can become one; the tree shows it with its bytes, and pugfs cannot write it back", where, d.Name)
	}
	if d.Name != "" {
		if !NameIsPath(d.Name) {
			c.warnf("decisions/names", key, "%s: the name has an empty, \".\" or \"..\" component, a NUL byte or a component over %d bytes; it cannot be a path and the tree does not show it", where, MaxNameComponent)
		} else if first, _, _ := strings.Cut(d.Name, "/"); first == ".pugmark" && strings.HasPrefix(key, layout.SessionsPrefix) {
			c.warnf("tree.md", key, "%s: the tree keeps .pugmark/ at a session's root for its own files; the live directory does not show this name, its history (.pugmark/at/<N>/) and log.jsonl do", where)
		}
	}
	if d.Deleted {
		if d.Name == "" {
			c.errorf("§10", key, "%s: tombstone without a name", where)
		}
		if d.Data != nil {
			c.warnf("§10", key, "%s: tombstone carries inline data (SHOULD NOT)", where)
		}
		if d.Fork {
			c.errorf("§10", key, "%s: a tombstone cannot also be a fork record", where)
		}
		if !d.Digest.IsZero() {
			c.infof("§10", key, "%s: tombstone names a blob (%s); the conventional tombstone has a zero digest", where, d.Digest)
			c.countRef(d.Digest)
		}
		return
	}
	if d.Digest.IsZero() {
		c.errorf("§7", key, "%s: no digest, and it is not a tombstone", where)
		return
	}
	be := c.blobs[d.Digest]
	if be == nil {
		c.errorf("§3", key, "%s: references %s, which does not exist", where, layout.BlobKey(d.Digest))
	} else {
		be.refs.Add(1)
		if be.size != d.Size {
			c.errorf("§7", key, "%s: size %d, but %s is %d bytes", where, d.Size, be.key, be.size)
		}
		encoded := d.ContentEncoding == layout.EncodingGzip || d.ContentEncoding == layout.EncodingZstd
		switch {
		case !be.read:
		case encoded && be.sniff != d.ContentEncoding:
			c.errorf("§15", key, "%s: content-encoding %s, but %s does not start with the %s magic", where, d.ContentEncoding, be.key, d.ContentEncoding)
		case encoded && be.decodeErr != nil && be.objEnc == layout.EncodingNone:
			// (An object that declares it too was reported as a blob.)
			c.errorf("§15", key, "%s: content-encoding %s, but %s does not decode (cut short?), and the tree shows it as EIO: %v", where, d.ContentEncoding, be.key, be.decodeErr)
		case d.ContentEncoding == layout.EncodingNone && (be.objEnc == layout.EncodingGzip || be.objEnc == layout.EncodingZstd):
			c.warnf("§15", key, "%s: declares no content-encoding, but %s has Content-Encoding %s: the tree shows the stored bytes (decisions.md \"Encodings without a declaration\"), decoded only on a mount with --sniff-encoding", where, be.key, be.objEnc)
		}
	}
	if d.Data != nil && (d.ContentEncoding == layout.EncodingGzip || d.ContentEncoding == layout.EncodingZstd) && layout.DigestOf(d.Data) == d.Digest {
		if err := decodes(d.Data, d.ContentEncoding); err != nil {
			c.errorf("§15", key, "%s: content-encoding %s, but its inline data does not decode (cut short?), and the tree shows it as EIO: %v", where, d.ContentEncoding, err)
		}
	}
	switch {
	case d.Data != nil:
		if len(d.Data) > layout.InlineLimit {
			c.errorf("§3.1", key, "%s: inline data is %d bytes; at most %d may be inlined", where, len(d.Data), layout.InlineLimit)
		}
		if layout.DigestOf(d.Data) != d.Digest {
			c.errorf("§7.1", key, "%s: inline data does not match the digest (readers fall back to the blob)", where)
		} else if int64(len(d.Data)) != d.Size {
			c.errorf("§7.1", key, "%s: inline data is %d bytes but size says %d", where, len(d.Data), d.Size)
		}
	case d.Size > 0 && d.Size <= layout.InlineLimit:
		// §3.1 says MAY; decisions.md says pugfs writers always inline.
		// A zero-byte body cannot be told apart from no data on the
		// wire (an empty "data" is omitted), so it is not reported.
		c.warnf("§7.1", key, "%s: %d-byte body without inline data (decisions.md: writers inline bodies of at most %d bytes)", where, d.Size, layout.InlineLimit)
	}
}

func (c *checker) countRef(d layout.Digest) {
	if be := c.blobs[d]; be != nil {
		be.refs.Add(1)
	}
}

// decodes decodes body per enc to its end, keeping nothing, and returns
// why it could not.
func decodes(body []byte, enc string) error {
	r, err := layout.NewDecoder(bytes.NewReader(body), enc)
	if err != nil {
		return err
	}
	defer r.Close()
	_, err = io.Copy(io.Discard, r)
	return err
}
