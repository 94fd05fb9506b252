// The Boost.Test module of diloco_chaos's parts; each test_*.cpp beside it
// holds one suite.
#define BOOST_TEST_MODULE diloco_chaos
#include <boost/test/unit_test.hpp>
