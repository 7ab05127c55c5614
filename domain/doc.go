// Package domain holds Sink's pure types: record addresses and keys, documents,
// revisions, mutations and merge intents, and the error classes every layer acts on.
//
// It imports only the standard library.
package domain
