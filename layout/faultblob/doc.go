// Package faultblob wraps a gocloud *blob.Bucket with configurable fault
// injection, so that tests and benchmarks can exercise pugfs against a
// misbehaving object store: slow requests, failed requests, requests that
// hang, PUTs whose response is lost after they committed
// (storage-layout §13.2) and eventually consistent listings (§2.5,
// §14.3).
//
// # Use from Go
//
//	inj := faultblob.NewInjector(faultblob.Options{Seed: 1})
//	bkt := faultblob.Wrap(memblob.OpenBucket(nil), inj)
//	inj.Add(faultblob.Rule{Ops: faultblob.OpGet, Latency: 5 * time.Millisecond})
//	inj.Add(faultblob.Rule{Ops: faultblob.OpPut, FailNth: 3,
//		Err: faultblob.TransientError(gcerrors.Internal)})
//	inj.Add(faultblob.Rule{Ops: faultblob.OpPut, FailProb: 0.1, LoseResponse: true})
//	inj.Add(faultblob.Rule{Ops: faultblob.OpList,
//		Match: faultblob.Match{Prefix: "sessions/"}, StaleFor: time.Second})
//	g, release := inj.Stall(faultblob.OpHead, faultblob.Match{Glob: "refs/*"})
//	... // poll g.Waiting() to see a HEAD blocked, then
//	release()
//	fmt.Println(inj.Stats().Ops[faultblob.OpPut].Errors)
//
// The wrapper forwards every request to the inner bucket with all of its
// options, including BeforeWrite, BeforeRead, BeforeList, BeforeCopy,
// BeforeDelete and IfNotExist, so driver-specific conditions (an S3
// If-Match set in BeforeWrite, say) still reach the inner driver. Errors
// from the inner bucket keep their gcerrors code (a lost IfNotExist race is
// still FailedPrecondition), ErrorAs reaches the inner driver's error
// types, and As on the bucket, its attributes, readers and list objects
// reaches the inner driver's types. Bucket.As also fills a
// **faultblob.Injector, which is how code that opened a bucket by URL finds
// its Injector. SignedURL is passed through without faults.
//
// Rules are matched by request kind (Op) and key (Match: prefix, path.Match
// glob, regexp). Every matching rule applies: latencies add up, stalls
// block in turn, and the first rule that fails the request picks the
// error. Injected errors are *Error values; gcerrors.Code reports their
// Code (gcerrors.Internal by default), errors.As finds them. Faults apply
// per request: once to the opening of a reader, not to its Reads; to the
// Close of a writer, where the upload commits; to each page of a listing.
// Randomness (FailProb, Jitter) comes from a math/rand/v2 PCG seeded by
// Options.Seed, so a test that issues requests in a fixed order sees the
// same faults on every run. Listing staleness follows Options.Now, which
// tests can replace with a fake clock; see Rule.StaleFor for the model.
package faultblob
