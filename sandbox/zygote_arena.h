#pragma once
// pymalloc arenas for the zygote, carved from one region backed by transparent huge pages.
//
// Every child pays for the zygote's memory three times: fork copies its page-table entries,
// the child's writes copy-on-write fault its pages, and exit tears them down, all per 4 KiB
// page. Python's small objects live in 1 MiB pymalloc arenas; placed in 2 MiB huge pages, the
// zygote's object heap is a handful of PMD entries instead of hundreds of PTEs.
#include <cstddef>

namespace azr::sandbox {

// Installs the arena allocator. Call before the interpreter is initialised.
void install_huge_page_arenas();
// After start-up: the part of the region the zygote did not touch reverts to small pages, so
// a child that needs new arenas never zero-fills a whole 2 MiB page. Returns the bytes of
// arenas the zygote holds in huge pages.
size_t seal_huge_page_arenas();

}  // namespace azr::sandbox
