package containers

import (
	"crypto/rand"
	"fmt"
	"math/big"
)

// generateName makes a dockerd-style "adjective_surname" name. dockerd's
// generator lives in its daemon module, far too large a dependency for two
// word lists; a retry (attempt > 0) adds a digit as dockerd does.
func generateName(attempt int) string {
	name := pick(adjectives) + "_" + pick(surnames)
	if attempt > 0 {
		name = fmt.Sprintf("%s%d", name, attempt%10)
	}
	return name
}

func pick(words []string) string {
	n, err := rand.Int(rand.Reader, big.NewInt(int64(len(words))))
	if err != nil {
		return words[0]
	}
	return words[n.Int64()]
}

var adjectives = []string{
	"admiring", "brave", "clever", "dreamy", "eager", "focused", "gallant", "happy", "jolly", "keen",
	"loving", "modest", "nifty", "optimistic", "peaceful", "quirky", "relaxed", "serene", "tender",
	"upbeat", "vibrant", "wizardly", "youthful", "zealous", "bold", "calm", "daring", "elegant",
}

var surnames = []string{
	"turing", "hopper", "lovelace", "ritchie", "thompson", "torvalds", "knuth", "dijkstra", "lamport",
	"liskov", "hamilton", "noether", "curie", "franklin", "goldberg", "kare", "perlman", "shannon",
	"wozniak", "babbage", "bell", "cerf", "engelbart", "feynman", "galileo", "hawking", "kepler",
}
