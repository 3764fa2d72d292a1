package observe

// SetCompareTokens replaces the token comparison for a test; it returns
// the comparison it replaced and the function that restores it.
func SetCompareTokens(f func(got, want string) bool) (old func(got, want string) bool, restore func()) {
	old = compareTokens
	compareTokens = f
	return old, func() { compareTokens = old }
}
