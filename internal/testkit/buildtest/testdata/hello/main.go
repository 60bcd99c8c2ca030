// Command hello prints its link-time greeting; buildtest's test builds it.
package main

import "fmt"

var greeting = "unset"

func main() { fmt.Println(greeting) }
