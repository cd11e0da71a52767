package tile

// The active tier's entry points. Tiers other than the generic one replace
// these at start-up; see tiers_*.go.
var (
	loadBlock = loadBlockGeneric
	update    = updateGeneric
)
