package domain

// Internals that the external tests (package domain_test) hold to account.
var (
	BareMediaTypeForTest  = bareMediaType
	ParseMediaTypeForTest = parseMediaType
	PlainPrefixForTest    = plainPrefix
	SpecialBitsForTest    = specialJSONStringBits
)

const PlainBlockForTest = plainBlock
