// The Boost.Test module of diloco_syncer's parts; each test_*.cpp beside it
// holds one suite.
#define BOOST_TEST_MODULE diloco_syncer
#include <boost/test/unit_test.hpp>
