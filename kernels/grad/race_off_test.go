//go:build !race

package grad

// raceDetector reports a build with the race detector, whose
// instrumentation makes allocation counts vary from call to call.
const raceDetector = false
