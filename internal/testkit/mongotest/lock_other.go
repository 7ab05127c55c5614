//go:build !unix

package mongotest

import "context"

// lockFile is a no-op where flock is unavailable: concurrent builds then
// duplicate work, but each writes a temp file and renames it into place.
func lockFile(ctx context.Context, path string) (unlock func(), err error) {
	return func() {}, ctx.Err()
}
