#include "ucs/datastruct/queue.h"

#include <gtest/gtest.h>

#include <vector>

namespace loom::ucs {
namespace {

struct Op {
    explicit Op(int v = 0) : value(v) {}
    int value;
    QueueLink qlink;
};

using OpQueue = Queue<Op, &Op::qlink>;

static_assert(sizeof(QueueLink) == 8);
static_assert(sizeof(OpQueue) == 16, "a queue is a head and a tail pointer");

std::vector<int> values(OpQueue& q) {
    std::vector<int> out;
    for (Op& op : q) out.push_back(op.value);
    std::vector<int> via_for_each;
    q.for_each([&](const Op& op) { via_for_each.push_back(op.value); });
    EXPECT_EQ(out, via_for_each);
    EXPECT_EQ(out.size(), q.length());
    EXPECT_EQ(out.empty(), q.empty());
    if (!out.empty()) {
        EXPECT_EQ(out.front(), q.front().value);
        EXPECT_EQ(out.back(), q.back().value);
    }
    return out;
}

std::vector<int> ints(std::initializer_list<int> v) {
    return v;
}

/** The tail pointer is right when a push_back lands after the last element. */
void expect_tail_ok(OpQueue& q) {
    Op probe(-1);
    std::vector<int> before = values(q);
    q.push_back(probe);
    before.push_back(-1);
    EXPECT_EQ(before, values(q));
    EXPECT_TRUE(q.remove(probe));
}

TEST(Queue, LinkAndHeadSizes) {
    EXPECT_EQ(8u, sizeof(QueueLink));
    EXPECT_EQ(16u, sizeof(OpQueue));
}

TEST(Queue, EmptyQueue) {
    OpQueue q;
    Op stranger(7);
    EXPECT_TRUE(q.empty());
    EXPECT_EQ(0u, q.length());
    EXPECT_EQ(nullptr, q.pop_front());
    EXPECT_TRUE(q.begin() == q.end());
    EXPECT_FALSE(q.remove(stranger));
    EXPECT_EQ(0u, q.remove_if([](Op&) { return true; }));
    expect_tail_ok(q);
}

TEST(Queue, OneElement) {
    OpQueue q;
    Op a(1);
    q.push_back(a);
    EXPECT_EQ(&a, &q.front());
    EXPECT_EQ(&a, &q.back());
    EXPECT_EQ(&a, q.pop_front());
    EXPECT_TRUE(q.empty());
    expect_tail_ok(q);  // pop of the last element must reset the tail
    q.push_front(a);
    EXPECT_EQ(&a, &q.back());
    expect_tail_ok(q);
}

TEST(Queue, FifoAndPushFront) {
    OpQueue q;
    Op a(1), b(2), c(3), d(0);
    q.push_back(a);
    q.push_back(b);
    q.push_back(c);
    q.push_front(d);
    EXPECT_EQ(ints({0, 1, 2, 3}), values(q));
    EXPECT_EQ(&d, q.pop_front());
    EXPECT_EQ(&a, q.pop_front());
    EXPECT_EQ(ints({2, 3}), values(q));
    expect_tail_ok(q);
}

TEST(Queue, RemoveHeadMiddleTail) {
    OpQueue q;
    std::vector<Op> ops;
    for (int i = 0; i < 5; ++i) ops.emplace_back(i);
    for (Op& op : ops) q.push_back(op);

    EXPECT_TRUE(q.remove(ops[0]));
    EXPECT_EQ(ints({1, 2, 3, 4}), values(q));
    expect_tail_ok(q);
    EXPECT_TRUE(q.remove(ops[4]));
    EXPECT_EQ(ints({1, 2, 3}), values(q));
    expect_tail_ok(q);  // removing the tail must move the tail pointer back
    EXPECT_TRUE(q.remove(ops[2]));
    EXPECT_EQ(ints({1, 3}), values(q));
    expect_tail_ok(q);
    EXPECT_FALSE(q.remove(ops[2])) << "already removed";
    EXPECT_TRUE(q.remove(ops[1]));
    EXPECT_TRUE(q.remove(ops[3]));
    EXPECT_TRUE(q.empty());
    expect_tail_ok(q);
}

TEST(Queue, EraseWhileIterating) {
    OpQueue q;
    std::vector<Op> ops;
    for (int i = 0; i < 6; ++i) ops.emplace_back(i);
    for (Op& op : ops) q.push_back(op);

    std::vector<int> seen;
    for (auto it = q.begin(); it != q.end();) {
        seen.push_back(it->value);
        if (it->value % 2 == 0) {
            it = q.erase(it);
        } else {
            ++it;
        }
    }
    EXPECT_EQ(ints({0, 1, 2, 3, 4, 5}), seen);
    EXPECT_EQ(ints({1, 3, 5}), values(q));
    expect_tail_ok(q);
}

TEST(Queue, RemoveIf) {
    OpQueue q;
    std::vector<Op> ops;
    for (int i = 0; i < 6; ++i) ops.emplace_back(i);
    for (Op& op : ops) q.push_back(op);

    EXPECT_EQ(0u, q.remove_if([](Op&) { return false; }));
    EXPECT_EQ(ints({0, 1, 2, 3, 4, 5}), values(q));
    EXPECT_EQ(3u, q.remove_if([](Op& op) { return op.value % 2 == 1; }));  // includes the tail
    EXPECT_EQ(ints({0, 2, 4}), values(q));
    expect_tail_ok(q);
    EXPECT_EQ(3u, q.remove_if([](Op&) { return true; }));
    EXPECT_TRUE(q.empty());
    expect_tail_ok(q);
}

TEST(Queue, SpliceBack) {
    OpQueue a, b;
    Op w(1), x(2), y(3), z(4);
    a.push_back(w);
    a.push_back(x);
    b.push_back(y);
    b.push_back(z);
    a.splice_back(b);
    EXPECT_EQ(ints({1, 2, 3, 4}), values(a));
    EXPECT_TRUE(b.empty());
    expect_tail_ok(a);
    expect_tail_ok(b);
}

TEST(Queue, SpliceFront) {
    OpQueue a, b;
    Op w(1), x(2), y(3);
    a.push_back(y);
    b.push_back(w);
    b.push_back(x);
    a.splice_front(b);
    EXPECT_EQ(ints({1, 2, 3}), values(a));
    EXPECT_TRUE(b.empty());
    expect_tail_ok(a);
    expect_tail_ok(b);
}

TEST(Queue, SpliceWithEmptyQueues) {
    OpQueue a, empty;
    Op x(1), y(2);
    a.splice_back(empty);
    a.splice_front(empty);
    EXPECT_TRUE(a.empty());
    expect_tail_ok(a);

    a.push_back(x);
    a.push_back(y);
    a.splice_back(empty);
    a.splice_front(empty);
    EXPECT_EQ(ints({1, 2}), values(a));

    OpQueue target;
    target.splice_back(a);
    EXPECT_EQ(ints({1, 2}), values(target));
    expect_tail_ok(target);
    expect_tail_ok(a);

    OpQueue front_target;
    front_target.splice_front(target);  // into an empty queue: the tail must come along
    EXPECT_EQ(ints({1, 2}), values(front_target));
    expect_tail_ok(front_target);

    front_target.splice_back(front_target);
    EXPECT_EQ(ints({1, 2}), values(front_target));
}

TEST(Queue, MoveKeepsTail) {
    OpQueue a;
    Op x(1), y(2);
    a.push_back(x);
    a.push_back(y);
    OpQueue b(std::move(a));
    EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): defined as empty
    expect_tail_ok(a);
    EXPECT_EQ(ints({1, 2}), values(b));
    expect_tail_ok(b);

    OpQueue c;
    c = std::move(b);
    EXPECT_EQ(ints({1, 2}), values(c));
    expect_tail_ok(c);

    OpQueue empty_source;
    OpQueue d(std::move(empty_source));
    EXPECT_TRUE(d.empty());
    expect_tail_ok(d);  // an empty moved-to queue must point its tail at its own head
}

TEST(Queue, ClearForgetsElements) {
    OpQueue q;
    Op x(1);
    q.push_back(x);
    q.clear();
    EXPECT_TRUE(q.empty());
    expect_tail_ok(q);
}

}  // namespace
}  // namespace loom::ucs
