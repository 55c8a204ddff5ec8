package demo

import (
	"fmt"
	"strings"
)

// The demo's file contents. Fixed text, so every run stores the same
// blobs; generated bodies use arithmetic, not randomness, for the same
// reason.

const mainReadme = `# pugfs demo

This session is what ` + "`pugfs demo`" + ` writes. Try:

    ls sessions/<id>/           the latest state
    ls sessions/<id>/.pugmark/  history: snapshots/, at/<N>/, log.jsonl
    cat names/demo/notes/today.md
    grep -r TODO sessions/
    getfattr -d sessions/<id>/config.json
`

const inboxReadme = `# inbox

Other sessions write here (cross-session writes, storage-layout §12).
`

const mainGoV1 = `package main

import "fmt"

func main() {
	fmt.Println("hello from the demo session")
}
`

const mainGoV2 = `package main

import (
	"fmt"
	"os"

	"example.com/demo/util"
)

func main() {
	name := "world"
	if len(os.Args) > 1 {
		name = os.Args[1]
	}
	// TODO: read the greeting from config.json
	fmt.Println(util.Title("hello, " + name))
}
`

const mainGoFork = `package main

import "fmt"

// The fork tries a different greeting without touching the parent.
func main() {
	for i := 3; i > 0; i-- {
		fmt.Println(i, "...")
	}
	fmt.Println("hello from the fork")
}
`

const stringsGo = `package util

import "strings"

// Title upper-cases the first letter of s.
func Title(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
`

const todayV1 = `# Today

- [ ] set up the project layout
- [ ] write main.go
`

const todayV2 = `# Today

- [x] set up the project layout
- [x] write main.go
- [ ] look at the build log (logs/build.log)
- [ ] TODO: compress the data exports
`

const todayFork = `# Today (fork)

- [x] forked from demo to try a countdown
- [ ] decide whether to merge it back
`

const draft = `# Plan

1. Ship the greeting.
2. Add configuration.
3. Benchmark the build.
`

const configJSON = `{
  "greeting": "hello",
  "retries": 3,
  "features": ["countdown", "title-case"]
}
`

const nextTask = `# Queued task

Rename the binary to demo-greeter and update the README.
`

const experiment = `# Experiment: countdown

Forked at this point to try a countdown before the greeting.
`

const nextExperiment = `# Experiment: localisation

Recorded as a fork; the child session is created on the next run.
`

const message = `# Review request

From the demo session: please look at logs/build.log and report the
slowest package.
`

const conventionsV1 = `# Conventions

- gofmt everything
`

const conventionsV2 = `# Conventions

- gofmt everything
- every exported name has a doc comment
- commit messages say why
`

const standup = `# Standup

alice: forked the demo session to try a countdown
bob: reviewing the build log
`

const glossary = `# Glossary

session   an append-only log of snapshots
snapshot  the descriptors committed at one version
fork      a child session that starts from a parent's snapshot
`

// bigLog is a deterministic build log of exactly BigSize bytes: large
// enough to need a blob fetch (no inline data) and several reads.
func bigLog() string {
	var b strings.Builder
	pkgs := []string{"cmd/demo", "internal/util", "internal/config", "internal/greet", "pkg/api"}
	for i := 0; b.Len() < BigSize; i++ {
		fmt.Fprintf(&b, "%06d ok   example.com/demo/%-18s %3d.%03ds  cached=%v\n",
			i, pkgs[i%len(pkgs)], (i*37)%400, (i*911)%1000, i%3 == 0)
	}
	return b.String()[:BigSize]
}

// reportCSV is a small table that compresses well (stored gzip-encoded).
func reportCSV() string {
	var b strings.Builder
	b.WriteString("day,builds,failures,minutes\n")
	for d := 1; d <= 60; d++ {
		fmt.Fprintf(&b, "2026-01-%02d,%d,%d,%d\n", (d-1)%28+1, 10+d%7, d%4/3, 20+(d*13)%17)
	}
	return b.String()
}

// eventsJSONL is a few KiB of JSON lines (stored zstd-encoded, so the
// stored body is above the inline limit only before compression).
func eventsJSONL() string {
	var b strings.Builder
	kinds := []string{"build", "test", "deploy", "rollback"}
	for i := 0; i < 120; i++ {
		fmt.Fprintf(&b, `{"seq":%d,"kind":%q,"ok":%v,"ms":%d}`+"\n", i, kinds[i%len(kinds)], i%9 != 0, (i*7919)%5000)
	}
	return b.String()
}
