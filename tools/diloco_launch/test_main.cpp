// The Boost.Test module of diloco_launch's parts; each test_*.cpp beside it
// holds one suite.
#define BOOST_TEST_MODULE diloco_launch
#include <boost/test/unit_test.hpp>
