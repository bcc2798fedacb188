// cli/table.h: columns aligned in terminal columns, not bytes. The expected lines are written out
// by hand: 漢 and 字 are East Asian wide (two columns each), U+0301 is a combining accent (none),
// and a byte that is not UTF-8 takes one, as a terminal's replacement character does.
#include "cli/table.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

namespace azr::cli {
namespace {

std::string printed(const Table& t) {
  std::ostringstream out;
  t.print(out);
  return out.str();
}

TEST(Table, AlignsWideAndCombiningCharactersByTheColumnsTheyTake) {
  Table t({"name", "n"});
  t.add({"漢字", "1"});         // 4 columns, 6 bytes
  t.add({"e\u0301", "22"});     // 1 column, 3 bytes
  t.add({"abc", "333"});
  t.add({"x\xffy", "4"});       // 3 columns: the stray byte takes one
  EXPECT_EQ(printed(t),
            "name  n\n"
            "漢字    1\n"
            "e\u0301      22\n"
            "abc   333\n"
            "x\xffy     4\n");
}

TEST(Table, CutsCellsToTheirWidthInColumnsWithoutSplittingACharacter) {
  Table t({"c"}, 4);
  t.add({"漢字"});     // 4 columns: fits
  t.add({"漢字x"});    // 5: cut to 3 columns, and 字 would make 4
  t.add({"a漢字"});    // 5: "a漢" is 3
  t.add({"abcde\u0301"});  // 5: "abc", the accent never left without its e
  EXPECT_EQ(printed(t),
            "c\n"
            "漢字\n"
            "漢~\n"
            "a漢~\n"
            "abc~\n");
}

}  // namespace
}  // namespace azr::cli
