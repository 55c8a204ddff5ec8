package schedblob

import (
	"errors"
	"net/http"

	"gocloud.dev/gcerrors"
)

// The adaptive limit: additive increase, multiplicative decrease, as TCP
// does with its window. An answer saying the backend is overloaded (S3's
// 503 SlowDown, a 429, gocloud's ResourceExhausted) halves the number of
// slots, at most once per epoch: answers to requests admitted before the
// last decrease say nothing about the new limit, so a burst of 503s from
// one overloaded moment halves once, not once per request. While requests
// wait for slots, every limit successful answers add one slot back, up to
// the bound given to New. Nothing else moves it: a rising latency on this
// kind of machine is mostly the mount's own CPU (the server, a proxy and
// pugfs share two cores), where fewer requests in flight buy no
// throughput, so latency alone does not shrink it.

// outcome is how a request ended, for the adaptive limit.
type outcome int

const (
	outcomeOK        outcome = iota // answered (not-found and precondition answers included)
	outcomeThrottled                // the backend said it is overloaded
	outcomeOther                    // failed otherwise, or cancelled: says nothing
)

// adaptState is the adaptive limit's bookkeeping, guarded by
// Scheduler.mu.
type adaptState struct {
	epoch  uint64 // bumped at each decrease
	credit int    // successes toward the next increase
	lowest int    // the lowest limit so far

	throttled, decreases, increases int64
}

// floorOf is the lowest limit for a bound of n: halving stops there, so
// a mount that was throttled keeps some parallelism: 4, or an eighth of n
// when that is less, and never below 2 (a slot for a program beside
// read-ahead's, specLimit) unless n is 1.
func floorOf(n int) int { return max(min(n, 2), min(4, n/8)) }

// adaptLocked moves the limit after a request admitted in epoch ended
// with o.
func (s *Scheduler) adaptLocked(epoch uint64, o outcome) {
	a := &s.adapt
	switch o {
	case outcomeThrottled:
		a.throttled++
		if epoch != a.epoch || s.limit <= s.floor {
			return
		}
		a.epoch++
		a.credit = 0
		a.decreases++
		s.setLimitLocked(max(s.floor, s.limit/2))
		a.lowest = min(a.lowest, s.limit)
	case outcomeOK:
		if s.limit >= s.max || len(s.blocking)+len(s.spec) == 0 {
			return // nothing to gain from another slot now
		}
		a.credit++
		if a.credit >= s.limit {
			a.credit = 0
			a.increases++
			s.setLimitLocked(s.limit + 1)
		}
	}
}

// outcomeOf classifies a request's error.
func outcomeOf(err error) outcome {
	switch {
	case err == nil:
		return outcomeOK
	case throttled(err):
		return outcomeThrottled
	}
	switch gcerrors.Code(err) {
	case gcerrors.NotFound, gcerrors.FailedPrecondition, gcerrors.AlreadyExists:
		return outcomeOK // an answer, and a quick one
	}
	return outcomeOther
}

// throttled reports whether err says the backend is overloaded: gocloud's
// ResourceExhausted (GCS's 429, the fault injector), or, since gocloud
// maps S3's SlowDown to Unknown, an HTTP status of 503 or 429 or an S3
// error code saying so anywhere in the chain.
func throttled(err error) bool {
	if gcerrors.Code(err) == gcerrors.ResourceExhausted {
		return true
	}
	var st interface{ HTTPStatusCode() int }
	if errors.As(err, &st) {
		if c := st.HTTPStatusCode(); c == http.StatusServiceUnavailable || c == http.StatusTooManyRequests {
			return true
		}
	}
	var ae interface{ ErrorCode() string }
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequests", "ServiceUnavailable":
			return true
		}
	}
	return false
}
