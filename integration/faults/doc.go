// Package faults holds Sink's container-level fault suite (make test-faults).
//
// The suite builds FROM scratch images from static binaries built in this
// repository (Sink with the non-idempotent "count" merge profile, the
// standalone kfake broker, the FerretDB test server; with SINK_FAULTS_DB=postgres
// PostgreSQL from the installed binaries and a data directory initdb wrote on
// the host), starts them on Docker networks it creates, drives load from the
// test process, injects faults (worker SIGKILL, docker pause of the database,
// SIGKILL and restart of the database, pg_terminate_backend of Sink's
// PostgreSQL backends, a network partition between a worker and the broker,
// a broker restart, server SIGTERM under synchronous load) and counts, for
// every trial, what happened to every accepted mutation. Everything it
// creates carries the label io.sink.faults and is removed at the end, after
// a failure and on SIGINT/SIGTERM. At start it also removes the objects of earlier runs whose test process is gone,
// unless SINK_FAULTS_SWEEP_STALE=0 (an engine shared with other developers).
//
// The suite runs only with SINK_FAULTS=1 (make test-faults sets it), so that
// make test stays fast; without a Docker engine it skips with one line.
// The tests are in the _test.go files; this file only documents the package.
package faults
