#include "ucs/datastruct/list.h"
#include "ucs/sys/build_options.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace loom::ucs {
namespace {

struct Item {
    explicit Item(int v = 0) : value(v) {}
    int value;
    ListLink link;
};

using ItemList = List<Item, &Item::link>;

// Link deliberately not the first member, in a polymorphic type, to exercise container_of offsets.
struct Base {
    virtual ~Base() = default;
    virtual int id() const { return 0; }
    double pad[3] = {};
};

struct Derived : Base {
    explicit Derived(int v) : value(v) {}
    int id() const override { return value; }
    char tag = 'x';
    ListLink link;
    int value;
};

static_assert(sizeof(ListLink) == 16);
static_assert(sizeof(ItemList) == 16, "a list head is one link");

/** Values front to back, after checking that the backward links mirror the forward ones. */
std::vector<int> values(ItemList& list) {
    std::vector<int> forward;
    for (Item& item : list) forward.push_back(item.value);
    std::vector<int> backward;
    for (auto it = list.end(); it != list.begin();) {
        --it;
        backward.push_back(it->value);
    }
    EXPECT_EQ(forward, std::vector<int>(backward.rbegin(), backward.rend())) << "prev links are inconsistent";
    EXPECT_EQ(forward.size(), list.length());
    EXPECT_EQ(forward.empty(), list.empty());
    return forward;
}

std::vector<int> ints(std::initializer_list<int> v) {
    return v;
}

TEST(List, LinkAndHeadSizes) {
    EXPECT_EQ(16u, sizeof(ListLink));
    EXPECT_EQ(16u, sizeof(ItemList));
}

TEST(List, EmptyList) {
    ItemList list;
    EXPECT_TRUE(list.empty());
    EXPECT_EQ(0u, list.length());
    EXPECT_EQ(nullptr, list.pop_front());
    EXPECT_EQ(nullptr, list.pop_back());
    EXPECT_TRUE(list.begin() == list.end());
    int visits = 0;
    for (Item& item : list.safe()) {
        (void)item;
        ++visits;
    }
    EXPECT_EQ(0, visits);
    EXPECT_EQ(ints({}), values(list));
}

TEST(List, OneElement) {
    ItemList list;
    Item a(1);
    EXPECT_FALSE(a.link.linked());
    list.push_back(a);
    EXPECT_TRUE(a.link.linked());
    EXPECT_FALSE(list.empty());
    EXPECT_EQ(&a, &list.front());
    EXPECT_EQ(&a, &list.back());
    EXPECT_EQ(nullptr, list.next(a));
    EXPECT_EQ(nullptr, list.prev(a));
    EXPECT_EQ(ints({1}), values(list));
    ItemList::remove(a);
    EXPECT_FALSE(a.link.linked());
    EXPECT_TRUE(list.empty());
    // The same element can go back in after removal.
    list.push_front(a);
    EXPECT_EQ(&a, list.pop_back());
    EXPECT_TRUE(list.empty());
    EXPECT_FALSE(a.link.linked());
}

TEST(List, PushFrontAndBackKeepOrder) {
    ItemList list;
    Item a(1), b(2), c(3), d(4);
    list.push_back(b);
    list.push_front(a);
    list.push_back(c);
    list.push_back(d);
    EXPECT_EQ(ints({1, 2, 3, 4}), values(list));
    EXPECT_EQ(&a, list.pop_front());
    EXPECT_EQ(&d, list.pop_back());
    EXPECT_EQ(ints({2, 3}), values(list));
}

TEST(List, RemoveHeadTailAndMiddle) {
    ItemList list;
    std::vector<Item> items;
    for (int i = 0; i < 5; ++i) items.emplace_back(i);
    for (Item& item : items) list.push_back(item);

    ItemList::remove(items[0]);  // head
    EXPECT_EQ(ints({1, 2, 3, 4}), values(list));
    ItemList::remove(items[4]);  // tail
    EXPECT_EQ(ints({1, 2, 3}), values(list));
    ItemList::remove(items[2]);  // middle
    EXPECT_EQ(ints({1, 3}), values(list));
    EXPECT_EQ(&items[1], &list.front());
    EXPECT_EQ(&items[3], &list.back());
    EXPECT_EQ(&items[3], list.next(items[1]));
    EXPECT_EQ(&items[1], list.prev(items[3]));
    for (int i : {0, 2, 4}) EXPECT_FALSE(items[i].link.linked());
}

TEST(List, InsertBeforeAndAfter) {
    ItemList list;
    Item a(1), b(2), c(3), d(4), e(5);
    list.push_back(c);
    ItemList::insert_before(c, a);
    ItemList::insert_after(a, b);
    ItemList::insert_after(c, e);
    ItemList::insert_before(e, d);
    EXPECT_EQ(ints({1, 2, 3, 4, 5}), values(list));
}

TEST(List, SpliceBack) {
    ItemList a, b;
    Item x(1), y(2), z(3), w(4);
    a.push_back(x);
    a.push_back(y);
    b.push_back(z);
    b.push_back(w);
    a.splice_back(b);
    EXPECT_EQ(ints({1, 2, 3, 4}), values(a));
    EXPECT_TRUE(b.empty());
    EXPECT_EQ(ints({}), values(b));
    // b stays usable after giving its elements away.
    ItemList::remove(w);
    b.push_back(w);
    EXPECT_EQ(ints({4}), values(b));
    EXPECT_EQ(ints({1, 2, 3}), values(a));
}

TEST(List, SpliceFront) {
    ItemList a, b;
    Item x(1), y(2), z(3);
    a.push_back(z);
    b.push_back(x);
    b.push_back(y);
    a.splice_front(b);
    EXPECT_EQ(ints({1, 2, 3}), values(a));
    EXPECT_TRUE(b.empty());
}

TEST(List, SpliceWithEmptyLists) {
    ItemList a, empty;
    Item x(1), y(2);
    a.splice_back(empty);
    a.splice_front(empty);
    EXPECT_TRUE(a.empty());
    EXPECT_EQ(ints({}), values(a));

    a.push_back(x);
    a.push_back(y);
    a.splice_back(empty);
    a.splice_front(empty);
    EXPECT_EQ(ints({1, 2}), values(a));

    // Into an empty list, both directions.
    ItemList target;
    target.splice_back(a);
    EXPECT_EQ(ints({1, 2}), values(target));
    EXPECT_TRUE(a.empty());
    a.splice_front(target);
    EXPECT_EQ(ints({1, 2}), values(a));
    EXPECT_TRUE(target.empty());

    // Splicing a list into itself is a no-op.
    a.splice_back(a);
    EXPECT_EQ(ints({1, 2}), values(a));
}

TEST(List, SafeIterationRemovingCurrent) {
    ItemList list, odd;
    std::vector<Item> items;
    for (int i = 0; i < 7; ++i) items.emplace_back(i);
    for (Item& item : items) list.push_back(item);

    int visited = 0;
    for (Item& item : list.safe()) {
        ++visited;
        if (item.value % 2 != 0) {
            ItemList::remove(item);
            odd.push_back(item);
        }
    }
    EXPECT_EQ(7, visited);
    EXPECT_EQ(ints({0, 2, 4, 6}), values(list));
    EXPECT_EQ(ints({1, 3, 5}), values(odd));

    for (Item& item : list.safe()) ItemList::remove(item);
    EXPECT_TRUE(list.empty());
    for (int i : {0, 2, 4, 6}) EXPECT_FALSE(items[i].link.linked());
}

TEST(List, ConstIteration) {
    ItemList list;
    Item a(1), b(2);
    list.push_back(a);
    list.push_back(b);
    const ItemList& view = list;
    int sum = 0;
    for (const Item& item : view) sum += item.value;
    EXPECT_EQ(3, sum);
    EXPECT_EQ(1, view.front().value);
    EXPECT_EQ(2, view.back().value);
}

TEST(List, ContainerOfFindsThePolymorphicElement) {
    List<Derived, &Derived::link> list;
    Derived a(10), b(20);
    ASSERT_NE(static_cast<void*>(&a), static_cast<void*>(&a.link)) << "link must not be at offset 0 here";
    list.push_back(a);
    list.push_back(b);
    std::vector<int> ids;
    for (Derived& d : list) ids.push_back(d.id());
    EXPECT_EQ(ints({10, 20}), ids);
    EXPECT_EQ(&b, &(List<Derived, &Derived::link>::element(b.link)));
    EXPECT_EQ(&a, &container_of<&Derived::link>(a.link));
    EXPECT_EQ(static_cast<std::ptrdiff_t>(reinterpret_cast<char*>(&a.link) - reinterpret_cast<char*>(&a)),
              member_offset<&Derived::link>());
    Base* base = list.pop_back();
    EXPECT_EQ(20, base->id());
}

TEST(List, MoveTransfersElements) {
    ItemList a;
    Item x(1), y(2);
    a.push_back(x);
    a.push_back(y);
    ItemList b(std::move(a));
    EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): defined as empty
    EXPECT_EQ(ints({1, 2}), values(b));

    ItemList c;
    Item z(3);
    c.push_back(z);
    c = std::move(b);
    EXPECT_FALSE(z.link.linked()) << "assignment unlinks the elements it drops";
    EXPECT_EQ(ints({1, 2}), values(c));
    EXPECT_TRUE(b.empty());  // NOLINT(bugprone-use-after-move)

    ItemList empty_source;
    ItemList d(std::move(empty_source));
    EXPECT_TRUE(d.empty());
    d.push_back(z);
    EXPECT_EQ(ints({3}), values(d));
}

TEST(List, ClearUnlinksEveryElement) {
    ItemList list;
    Item a(1), b(2);
    list.push_back(a);
    list.push_back(b);
    list.clear();
    EXPECT_TRUE(list.empty());
    EXPECT_FALSE(a.link.linked());
    EXPECT_FALSE(b.link.linked());
    list.push_back(b);
    EXPECT_EQ(ints({2}), values(list));
}

TEST(ListDeathTest, InsertingALinkedElementIsCaught) {
#ifndef LOOM_ENABLE_ASSERT
    GTEST_SKIP() << "the double-insert check is an assertion-build check (configure --enable-assertions)";
#else
    ItemList a, b;
    Item x(1);
    a.push_back(x);
    EXPECT_DEATH(b.push_back(x), "assertion failed");
    Item y(2);
    EXPECT_DEATH(ItemList::remove(y), "assertion failed");
#endif
}

}  // namespace
}  // namespace loom::ucs
