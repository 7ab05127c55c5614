package domain

// Waves groups items into dependency waves: item i goes to wave w when w
// items before it address the same record. Within a wave every record
// appears at most once, so a wave can go to storage as one batch; running
// the waves one after the other keeps each record's operations in their
// original order. The result holds indexes into the input.
func Waves(n int, id func(i int) RecordID) [][]int {
	if n == 0 {
		return nil
	}
	seen := make(map[RecordID]int, n)
	var waves [][]int
	for i := 0; i < n; i++ {
		rid := id(i)
		w := seen[rid]
		seen[rid] = w + 1
		if w == len(waves) {
			waves = append(waves, nil)
		}
		waves[w] = append(waves[w], i)
	}
	return waves
}
