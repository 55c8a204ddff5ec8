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
//
// # Use from a URL
//
// Importing the package registers the schemes fault+file, fault+mem,
// fault+s3, fault+gs and fault+azblob on blob.DefaultURLMux. Such a URL is
// the inner bucket's URL with "fault+" before its scheme and fault_
// parameters in its query, e.g.
//
//	fault+s3://bucket?region=us-east-1&fault_latency=5ms&fault_error_rate=0.01&fault_seed=1&fault_stale=200ms&fault_lost_put_rate=0.1&fault_ops=get,list
//
// The fault_ parameters are removed, the rest of the URL (scheme without
// "fault+", host, path, other parameters) is opened through the same URL
// mux, and the result is wrapped. The inner scheme's driver must be
// linked in by its own package. The parameters:
//
//	fault_seed=N           RNG seed (uint64, default 0)
//	fault_ops=LIST         comma-separated ops that fault_latency,
//	                       fault_jitter and fault_error_rate apply to:
//	                       get, head, put, list, delete, copy, all
//	                       (default all)
//	fault_prefix=P         restrict every fault to keys starting with P
//	fault_latency=D        fixed delay per request (Go duration, e.g. 5ms)
//	fault_jitter=D         extra random delay in [0, D] per request
//	fault_error_rate=F     probability in [0, 1] that a request fails
//	                       before reaching the inner bucket
//	fault_error_code=C     gcerrors code of injected errors, e.g. Internal
//	                       (default), ResourceExhausted, DeadlineExceeded
//	fault_lost_put_rate=F  probability in [0, 1] that a PUT commits and
//	                       still returns an error (any fault_ops)
//	fault_stale=D          listings omit keys PUT within the last D and
//	                       still show keys DELETEd within the last D (any
//	                       fault_ops)
//	fault_stall_prefix=P   every request (any op, whatever fault_ops and
//	                       fault_prefix say) on a key or listing prefix
//	                       starting with P hangs for fault_stall
//	fault_stall=D          how long a stalled request hangs (default 1m)
//	fault_active_file=F    faults apply only to requests that start while
//	                       the file F exists, and delays and stalls end
//	                       early once it is removed: a test in another
//	                       process switches faults on and off with it
//	                       (listing staleness is not switched)
//	fault_count_prefix=P   inject nothing; count the requests of each
//	                       kind on keys starting with P (OpStats.Counted),
//	                       so that a test can tell blob reads from the rest
//
// An unknown fault_ parameter is an error. The standard prefix and key
// parameters are applied by the URL mux outside the wrapper, so rules see
// full keys. ParseParams and SplitURL give the CLI the parsed faults;
// Params.String describes them.
package faultblob
