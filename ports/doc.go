// Package ports declares the small interfaces the application needs from the
// outside world (storage, the mutation queue, merge profiles) and the shared
// conformance suites every implementation runs. Signatures use domain types
// only, never technology types.
package ports
