//go:build race

package zktest

const raceBuild = true
