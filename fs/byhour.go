package fs

import (
	"context"
	"slices"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/pugmark/pugfs/layout"
)

// hourFormat names an hour partition under by-hour/ (tree.md): the UTC
// hour that session IDs carry in their first bytes (§4.1). Names sort as
// the hours do, so `ls -r by-hour/` shows the newest first.
const hourFormat = "2006-01-02T15"

// byHourDir is by-hour/: one directory per hour partition of the bucket.
type byHourDir struct{ f *FS }

func (b *byHourDir) list(ctx context.Context) ([]child, error) {
	hours, err := b.f.cache.Hours(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]child, 0, len(hours))
	for _, h := range hours {
		out = append(out, b.f.hourChild(h))
	}
	return out, nil
}

// find answers an hour partition that exists, as the listing shows it,
// even one whose keys are all no session (then empty). It costs the one LIST that listing
// the hour costs anyway (the cache keeps it for the readdir that usually
// follows); a name that is not an hour costs nothing.
func (b *byHourDir) find(ctx context.Context, name string) (child, error) {
	h, ok := parseHourName(name)
	if !ok {
		return child{}, syscall.ENOENT
	}
	// A lookup is a listing's first step (hourDir.list).
	go b.f.cache.PrefetchHours(context.WithoutCancel(ctx), h)
	_, exists, err := b.f.cache.HourPartition(ctx, h)
	if err != nil {
		return child{}, err
	}
	if !exists {
		return child{}, syscall.ENOENT
	}
	return b.f.hourChild(h), nil
}

func (b *byHourDir) dirAttr(ctx context.Context, out *fuse.Attr) error {
	setTimes(out, b.f.start)
	return nil
}

// hourName is the directory name of hour counter h.
func hourName(h uint32) string { return hourTime(h).Format(hourFormat) }

func hourTime(h uint32) time.Time { return time.Unix(int64(h)*3600, 0).UTC() }

// parseHourName is the inverse of hourName: only the canonical spelling of
// an hour that a session ID can carry (years 1970-9999) is one.
func parseHourName(name string) (uint32, bool) {
	t, err := time.Parse(hourFormat, name)
	if err != nil || t.Format(hourFormat) != name || t.Year() < 1970 || t.Year() > 9999 {
		return 0, false
	}
	return uint32(t.Unix() / 3600), true
}

func (f *FS) hourChild(h uint32) child {
	name := hourName(h)
	return f.dir(name, inoOf("by-hour", name), f.ttl, &hourDir{f: f, hour: h})
}

// hourDir is by-hour/<hour>/: a symlink to ../../sessions/<id> per session
// of that hour partition, listed with one LIST (per 1,000 sessions) and
// no request per session: a link's attributes are its own, not the
// session's.
type hourDir struct {
	f    *FS
	hour uint32
}

func (d *hourDir) list(ctx context.Context) ([]child, error) {
	// ls by-hour/*/ lists its arguments one after another in name
	// order, the hours' order: list the next ones meanwhile.
	go d.f.cache.PrefetchHours(context.WithoutCancel(ctx), d.hour)
	ids, err := d.f.cache.HourSessions(ctx, d.hour)
	if err != nil {
		return nil, err
	}
	out := make([]child, 0, len(ids))
	for _, id := range ids {
		out = append(out, d.link(id.String(), id))
	}
	return out, nil
}

// find answers the sessions of this hour only: an ID whose first bytes
// name another hour is not here, whatever sessions/ has.
func (d *hourDir) find(ctx context.Context, name string) (child, error) {
	id, err := layout.ParseSessionID(name)
	if err != nil || id.Hour() != d.hour {
		return child{}, syscall.ENOENT
	}
	ids, err := d.f.cache.HourSessions(ctx, d.hour)
	if err != nil {
		return child{}, err
	}
	if _, found := slices.BinarySearchFunc(ids, id, layout.SessionID.Compare); !found {
		return child{}, syscall.ENOENT
	}
	return d.link(name, id), nil
}

func (d *hourDir) link(name string, id layout.SessionID) child {
	return d.f.symlink(name, inoOf("by-hour-link", id.String()), "../../sessions/"+id.String(), id.Time(), d.f.ttl)
}

func (d *hourDir) dirAttr(ctx context.Context, out *fuse.Attr) error {
	setTimes(out, hourTime(d.hour))
	return nil
}
