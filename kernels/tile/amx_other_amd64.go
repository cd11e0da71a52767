//go:build amd64 && !purego && !linux

package tile

// requestAMX: the amxbf16 tier asks for the tile state the Linux way only.
func requestAMX() string { return "Linux (the AMX permission request)" }
