// Package backoff is keyhook's one way of waiting before trying again:
// exponential growth with jitter (cenkalti/backoff underneath, its types
// kept out of the API), every wait cut short by its context, and time
// taken from an injectable clock so tests spend none.
//
// It knows nothing of what is being retried; callers decide when to stop.
package backoff
