// Package graphtest holds the graph-level tests of the module: complete
// Gorgonia graphs that use the ops of package op the way a model author
// would, run in a TapeMachine and a LispMachine, and are checked against the
// eager API and float64 references. The tests are meant to be read and
// copied.
//
// Of this module the tests import op and kernels/lowp only, as a model
// author's code would; no package imports this one.
package graphtest
