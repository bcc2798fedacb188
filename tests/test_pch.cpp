// The translation unit that builds the suites' shared precompiled header (tests/CMakeLists.txt,
// azr_test_pch); it has no code of its own.
