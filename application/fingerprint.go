package application

import (
	"fmt"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// FingerprintPolicy says what the worker does with a queued merge whose
// profile has changed definition since it was submitted (the merge's
// fingerprint differs from the profile's).
type FingerprintPolicy string

// Fingerprint policies.
const (
	// FingerprintApply applies the merge with the current definition (the
	// default: a profile name is a contract, as for profiles written in Go,
	// whose new code also applies merges queued before a deployment).
	FingerprintApply FingerprintPolicy = "apply"
	// FingerprintDeadLetter fails the merge permanently, so that the
	// worker writes it to the dead-letter topic.
	FingerprintDeadLetter FingerprintPolicy = "dead-letter"
)

// WithFingerprintPolicy sets the worker's fingerprint policy (default
// FingerprintApply).
func WithFingerprintPolicy(p FingerprintPolicy) Option {
	return func(s *Service) { s.fingerprintPolicy = p }
}

// fingerprintOf returns the fingerprint of the named profile's current
// definition, or "" for profiles without one.
func (s *Service) fingerprintOf(profile string) string {
	if fp, ok := s.profiles[profile].(ports.FingerprintedProfile); ok {
		return fp.Fingerprint()
	}
	return ""
}

// stampFingerprint records, on a merge about to be queued, the fingerprint
// of its profile's definition (whatever the caller put there).
func (s *Service) stampFingerprint(m *domain.Mutation) {
	if m.Kind == domain.MutationMerge {
		m.Merge.Fingerprint = s.fingerprintOf(m.Merge.Profile)
	}
}

// checkFingerprint applies the fingerprint policy to a queued merge. A
// merge without a fingerprint (queued for a profile that has none, or
// before fingerprints existed) is applied.
func (s *Service) checkFingerprint(ref opRef, m *domain.Mutation) *domain.Error {
	if m.Kind != domain.MutationMerge || m.Merge.Fingerprint == "" {
		return nil
	}
	if _, ok := s.profiles[m.Merge.Profile]; !ok {
		return nil // validation reports the unknown profile
	}
	now := s.fingerprintOf(m.Merge.Profile)
	if now == m.Merge.Fingerprint {
		return nil
	}
	apply := s.fingerprintPolicy != FingerprintDeadLetter
	s.obs.MergeFingerprintMismatch(m.Merge.Profile, apply)
	if apply {
		s.log.Warn("applying a queued merge with a changed profile definition", "profile", m.Merge.Profile,
			"queued_fingerprint", safeFingerprint(m.Merge.Fingerprint), "fingerprint", safeFingerprint(now), "mutation_id", m.ID)
		return nil
	}
	return newOpError(ref, fieldIntent, domain.CodeFailedPrecondition, false, fmt.Sprintf(
		"merge profile %q has changed since the merge was queued (queued under definition %s, now %s); SINK_MERGE_FINGERPRINT_POLICY=dead-letter",
		m.Merge.Profile, safeFingerprint(m.Merge.Fingerprint), safeFingerprint(now)), nil)
}

// safeFingerprint renders a fingerprint from the queue for messages: a
// well-formed one as is, anything else (bytes from the log) as a class.
func safeFingerprint(fp string) string {
	if fp == "" {
		return "none"
	}
	if len(fp) > 80 {
		return "(malformed)"
	}
	for i := 0; i < len(fp); i++ {
		c := fp[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == ':') {
			return "(malformed)"
		}
	}
	return fp
}
